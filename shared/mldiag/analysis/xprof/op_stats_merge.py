"""One host's OpStats, merged from the OpStats of consecutive time slices of its profile.

XProf's op_stats conversion needs many times a profile's size in memory, so a
large ``.xplane.pb`` is cut into consecutive time slices, each converted on its
own; :func:`merge_time_slices` puts their OpStats back together as the OpStats
of the whole host, which XProf's converters then read from its op_stats cache
as if they had made it.

The rules follow XProf's own combiner (``xprof/convert/op_stats_combiner.cc``
and the op metrics, kernel stats and tf-function combiners it calls), which
merges the OpStats of *several hosts* profiled at the same time. Slices are one
host at *different* times, so where the two differ the slices' meaning wins:

* op metrics: summed per op as XProf does, except that an op's ``num_cores`` is
  the most cores any slice saw it on (the slices share their cores; summing
  would count each core once per slice);
* steps: the slices' steps follow each other, none are intersected. XProf
  numbers a host's steps by the group ids its event grouping hands out in trace
  order, so every slice counts again from 0 or 1; a slice whose first number
  does not follow the previous slice's last is renumbered to follow it;
* run environment: still one host, so host, task and device core counts are
  not added up;
* kernel reports of the same kernel, and source lines, are summed rather than
  listed or overwritten per slice.

Op times, counts, FLOPs and bytes add up exactly (every op event lies in one
slice). XProf takes a database's ``total_time_ps`` as the span from its first
op to its last, so the time between the slices, around each cut, is missing
from the slices' totals; the caller measures it while cutting
(:meth:`mldiag.analysis.profile.slices.TimeSlices.gaps_ns`) and the merge adds it back
where XProf counts it: the total time of the device, flat device and host
databases, their IDLE op (XProf's total time less op time), and on a TPU the
idle time of the device's duty cycles (no op runs between two slices). The
databases of complete steps are built from steps, not spans, and take none of
it. XProf's device total adds up each device plane's span, so the gaps summed
over the device planes give back what the slices miss; its host total adds up
the span of each host thread's TensorFlow ops, so gaps measured over the host
plane as a whole give back only part of the host's.

On a TPU the duty cycle spans the chip's ops: its idle time takes the time
between the slices' ops (``device_ops``), which differs from the planes' where
other lines (steps, program runs) reach past the ops around a cut.

What the slices cannot give back: where a host's events mark its steps, XProf
drops the first and last step of a host with more than five steps, so each cut
loses the two steps beside it; where the device marks its steps (a TPU's
``Steps`` line) and the cuts fall at step starts, none is lost.

Pure: bytes in, bytes out. ``xprof`` is imported on first use only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

KERNEL_REPORTS_KEPT = 1000  # XProf's kMaxNumOfKernels
_IDLE = "IDLE"
# The keys of ``gaps_ps``: time between the slices on the device and host planes, and between the device's ops.
GAP_KINDS = ("device", "host", "device_ops")
_CPU_DEVICE_TYPES = ("CPU", "Device")  # what a host without an accelerator reports as its device type
_TRACED_OR_EAGER = ("TRACED_MODE", "EAGER_MODE")  # tf-function modes XProf counts as expensive

_OP_SUMS = ("occurrences", "time_ps", "self_time_ps", "normalized_time_ps", "flops", "model_flops", "flops_v2",
            "model_flops_v2", "bytes_accessed", "dma_stall_ps")
_FLAT_OP_SUMS = (*_OP_SUMS, "total_time_ps")
_OP_METADATA = ("long_name", "fingerprint", "category", "provenance", "deduplicated_name", "core_type")
_FLAT_OP_METADATA = ("op_id", "parent_op_id", "long_name", "category", "provenance", "deduplicated_name",
                     "core_type", "symbol_id", "children_count", "has_sc_children")
_DB_SUMS = ("total_time_ps", "total_op_time_ps", "idle_time_ps", "busy_time_ps", "normalized_total_op_time_ps")
_OP_DB_SUMS = (*_DB_SUMS, "total_host_infeed_enq_duration_ps", "total_host_infeed_enq_start_timestamp_ps_diff",
               "busy_time_high_confidence_ps", "idle_time_high_confidence_ps")
_FLAT_DB_SUMS = (*_DB_SUMS, "profile_time_ps")
# (busy, idle) of each duty cycle a database may hold: XProf's and its high-confidence one, which leaves out
# ops it cannot vouch for; the flat database has only the first.
_DUTY_CYCLES = (("busy_time_ps", "idle_time_ps"), ("busy_time_high_confidence_ps", "idle_time_high_confidence_ps"))
_SOURCE_LINE_SUMS = ("occurrences", "self_time_ps", "time_ps", "flops", "flops_v2")


def merge_time_slices(slices: Sequence[bytes], *, gaps_ps: Mapping[str, int] | None = None) -> bytes:
    """The serialized OpStats of a host, from the serialized OpStats of its time slices in time order.

    ``gaps_ps`` is the time between the slices, in picoseconds, summed over the device planes
    (``"device"``) and over the host planes (``"host"``); it goes back into the merged total and idle
    times. A single slice comes back as it was. Raises :class:`ValueError` for no slices, for bytes that
    are not an OpStats, or for gaps that are not a non-negative time of a known kind.
    """
    if not slices:
        raise ValueError("no OpStats to merge: at least one time slice is needed")
    gaps = _checked_gaps(gaps_ps or {}, len(slices))
    from xprof.protobuf import op_stats_pb2

    parsed = [_parse(op_stats_pb2.OpStats, data, index) for index, data in enumerate(slices)]
    if len(parsed) == 1:
        return parsed[0].SerializeToString()
    merged = op_stats_pb2.OpStats()
    _merge_op_metrics_dbs([part.host_op_metrics_db for part in parsed], merged.host_op_metrics_db)
    _merge_op_metrics_dbs([part.device_op_metrics_db for part in parsed], merged.device_op_metrics_db)
    _merge_op_metrics_dbs([part.hlo_metrics_db_complete_steps_only for part in parsed],
                          merged.hlo_metrics_db_complete_steps_only)
    for name in ("flat_device_op_metrics_db", "flat_hlo_metrics_db_complete_steps_only"):
        present = [getattr(part, name) for part in parsed if part.HasField(name)]
        if present:
            _merge_flat_op_metrics_dbs(present, getattr(merged, name))
    _add_gap(merged.host_op_metrics_db, merged.host_op_metrics_db.metrics_db, "name", _DUTY_CYCLES, gaps["host"],
             gaps["host"])
    _add_gap(merged.device_op_metrics_db, merged.device_op_metrics_db.metrics_db, "name", _DUTY_CYCLES,
             gaps["device"], gaps["device_ops"])
    if merged.HasField("flat_device_op_metrics_db"):
        flat = merged.flat_device_op_metrics_db
        _add_gap(flat, flat.op_instances, "hlo_name", _DUTY_CYCLES[:1], gaps["device"], gaps["device_ops"])
    _concatenate_steps([part.step_db for part in parsed], merged.step_db)
    _merge_run_environments([part.run_environment for part in parsed], merged.run_environment)
    _fill_unset([part.perf_env for part in parsed], merged.perf_env)
    for part in parsed:
        _add_missing(merged.core_id_to_details, part.core_id_to_details)
        _add_missing(merged.program_id_to_name_map, part.program_id_to_name_map)
    _merge_diagnostics([part.diagnostics for part in parsed], merged.diagnostics)
    _merge_kernel_reports([part.kernel_stats_db for part in parsed], merged.kernel_stats_db)
    _merge_tf_functions([part.tf_function_db for part in parsed], merged.tf_function_db)
    _merge_source_stats([part.source_stats for part in parsed], merged.source_stats)
    _average_performance_counters([part.performance_counter_result for part in parsed],
                                  merged.performance_counter_result)
    serving = [part.disaggregated_serving_latency for part in parsed if part.HasField("disaggregated_serving_latency")]
    if serving:
        _merge_serving_latency(serving, merged.disaggregated_serving_latency)
    return merged.SerializeToString()


def _checked_gaps(gaps_ps: Mapping[str, int], count: int) -> dict[str, int]:
    unknown = sorted(set(gaps_ps) - set(GAP_KINDS))
    if unknown:
        raise ValueError(f"unknown kind of gap between time slices: {', '.join(unknown)} "
                         f"(known: {', '.join(GAP_KINDS)})")
    gaps = {kind: gaps_ps.get(kind, 0) for kind in GAP_KINDS[:2]}
    gaps["device_ops"] = gaps_ps.get("device_ops", gaps["device"])  # without op lines, the planes' gap
    for kind, gap in gaps.items():
        if not isinstance(gap, int) or isinstance(gap, bool) or gap < 0:
            raise ValueError(f"the {kind} gap between time slices must be a whole number of picoseconds, "
                             f"0 or more, not {gap!r}")
    if count == 1 and any(gaps.values()):
        raise ValueError("a single time slice has no time between slices to add back")
    return gaps


def _parse(message_class: Any, data: bytes, index: int) -> Any:
    from google.protobuf.message import DecodeError

    message = message_class()
    try:
        message.ParseFromString(data)
    except DecodeError as error:
        raise ValueError(f"time slice {index} is not a serialized OpStats: {error}") from None
    return message


def _add(source: Any, target: Any, names: Iterable[str]) -> None:
    for name in names:
        setattr(target, name, getattr(target, name) + getattr(source, name))


def _fill_metadata(source: Any, target: Any, names: Iterable[str]) -> None:
    """Copy each of ``names`` that ``target`` lacks (holds its default) and ``source`` has."""
    for name in names:
        if not getattr(target, name):
            setattr(target, name, getattr(source, name))


def _fill_submessages(source: Any, target: Any, names: Iterable[str]) -> None:
    for name in names:
        if not target.HasField(name) and source.HasField(name):
            getattr(target, name).CopyFrom(getattr(source, name))


def _add_missing(target: Any, source: Any) -> None:
    """Copy into the protobuf map ``target`` the entries of ``source`` whose keys it lacks."""
    for key, value in source.items():
        if key not in target:
            if hasattr(value, "CopyFrom"):
                target[key].CopyFrom(value)
            else:
                target[key] = value


# --- op metrics ------------------------------------------------------------------------------


def _merge_memory_accessed(source: Any, target: Any) -> None:
    by_kind = {(access.memory_space, access.operation_type): access for access in target}
    for access in source:
        kind = (access.memory_space, access.operation_type)
        if kind not in by_kind:
            by_kind[kind] = target.add(memory_space=access.memory_space, operation_type=access.operation_type)
        by_kind[kind].bytes_accessed += access.bytes_accessed


def _merge_op(source: Any, target: Any, sums: Sequence[str]) -> None:
    """Fold one slice's metrics of an op into the merged metrics that already hold an earlier slice's."""
    if target.occurrences == 0:
        target.min_time_ps = source.min_time_ps
    elif source.occurrences:
        target.min_time_ps = min(target.min_time_ps, source.min_time_ps)
    _add(source, target, sums)
    target.is_eager = target.is_eager or source.is_eager
    target.autotuned = target.autotuned or source.autotuned
    target.num_cores = max(target.num_cores, source.num_cores)
    _merge_memory_accessed(source.memory_accessed_breakdown, target.memory_accessed_breakdown)


def _merge_op_metrics_dbs(dbs: Sequence[Any], merged: Any) -> None:
    by_op: dict[tuple[int, str], Any] = {}
    for db in dbs:
        _add(db, merged, _OP_DB_SUMS)
        _add(db.precision_stats, merged.precision_stats, ("compute_16bit_ps", "compute_32bit_ps"))
        for op in db.metrics_db:
            key = (op.hlo_module_id, op.name)
            if key not in by_op:
                by_op[key] = merged.metrics_db.add()
                by_op[key].CopyFrom(op)
                continue
            target = by_op[key]
            _fill_metadata(op, target, _OP_METADATA)
            _fill_submessages(op, target, ("layout", "children", "source_info"))
            _merge_op(op, target, _OP_SUMS)
            if op.HasField("vdd_energy_j") or target.HasField("vdd_energy_j"):
                target.vdd_energy_j += op.vdd_energy_j


def _merge_flat_op_metrics_dbs(dbs: Sequence[Any], merged: Any) -> None:
    by_op: dict[tuple[int, str], Any] = {}
    for db in dbs:
        _add(db, merged, _FLAT_DB_SUMS)
        _add(db.precision_stats, merged.precision_stats, ("compute_16bit_ps", "compute_32bit_ps"))
        for op in db.op_instances:
            if op.category == _IDLE and op.parent_op_id:
                continue
            if op.is_fusion_child:
                merged.op_instances.add().CopyFrom(op)
                continue
            key = (op.hlo_module_id, op.hlo_name)
            if key not in by_op:
                by_op[key] = merged.op_instances.add()
                by_op[key].CopyFrom(op)
                continue
            target = by_op[key]
            _fill_metadata(op, target, _FLAT_OP_METADATA)
            _fill_submessages(op, target, ("source_info",))
            _merge_op(op, target, _FLAT_OP_SUMS)


def _add_gap(db: Any, ops: Any, name_field: str, duty_cycles: Sequence[tuple[str, str]], gap_ps: int,
             ops_gap_ps: int) -> None:
    """Add the time between the slices to a database's total time and to the idle time XProf derives from a
    span: its IDLE op (the total time less the op time) and, where the database has them (a TPU's), each duty
    cycle's idle time, from the time between the slices' ops (``ops_gap_ps``: a duty cycle spans the chip's
    ops, less the time they are active, and none are between slices). A database no slice timed (no ops)
    stays untimed, as XProf leaves it."""
    if not db.total_time_ps:
        return
    if gap_ps:
        db.total_time_ps += gap_ps
        idle = next((op for op in ops if op.category == _IDLE), None)
        if idle is None:
            idle = ops.add(**{name_field: _IDLE}, category=_IDLE)
        idle.time_ps += gap_ps
        idle.self_time_ps += gap_ps
    for busy_field, idle_field in duty_cycles:
        if getattr(db, busy_field) or getattr(db, idle_field):
            setattr(db, idle_field, getattr(db, idle_field) + ops_gap_ps)


# --- steps -----------------------------------------------------------------------------------


def _concatenate_steps(step_dbs: Sequence[Any], merged: Any) -> None:
    next_free: int | None = None  # the lowest number the next slice's first step may keep
    for step_db in step_dbs:
        sequence = step_db.step_sequence
        shift = 0
        if sequence and next_free is not None and sequence[0].step_num < next_free:
            shift = next_free - sequence[0].step_num
        for step in sequence:
            added = merged.step_sequence.add()
            added.CopyFrom(step)
            added.step_num = step.step_num + shift
            for info in added.step_info_per_core.values():
                info.step_num = added.step_num
        if sequence:
            next_free = merged.step_sequence[-1].step_num + 1
        merged.use_incomplete_step = merged.use_incomplete_step or step_db.use_incomplete_step
        merged.empty_intersect = merged.empty_intersect or step_db.empty_intersect
        merged.num_steps_dropped += step_db.num_steps_dropped


# --- run and perf environment ----------------------------------------------------------------


def _merge_run_environments(environments: Sequence[Any], merged: Any) -> None:
    merged.CopyFrom(environments[0])
    for environment in environments[1:]:
        for hostname, value in environment.hostnames.items():
            merged.hostnames[hostname] = value
        if environment.device_type not in _CPU_DEVICE_TYPES:
            if merged.device_type in _CPU_DEVICE_TYPES or not merged.device_type:
                merged.device_type = environment.device_type
                merged.system_topology.CopyFrom(environment.system_topology)
            for name in ("device_core_count", "replica_count", "num_cores_per_replica"):
                setattr(merged, name, max(getattr(merged, name), getattr(environment, name)))
        elif not merged.device_type:
            merged.device_type = environment.device_type
        merged.hardware_type = max(merged.hardware_type, environment.hardware_type)
        merged.task_count = max(merged.task_count, environment.task_count)
        if (not merged.host_independent_job_info.profile_duration_ms
                and environment.host_independent_job_info.profile_duration_ms):
            merged.host_independent_job_info.CopyFrom(environment.host_independent_job_info)
        for job in environment.host_dependent_job_info:
            if job not in merged.host_dependent_job_info:
                merged.host_dependent_job_info.add().CopyFrom(job)
        merged.host_trace_level = environment.host_trace_level
        merged.is_training = merged.is_training or environment.is_training
    merged.host_count = len(merged.hostnames)
    if any(environment.power_metrics.power_component_metrics for environment in environments[1:]):
        _merge_power_metrics([environment.power_metrics for environment in environments], merged.power_metrics)


def _merge_power_metrics(per_slice: Sequence[Any], merged: Any) -> None:
    """Per component: the highest maxima, and the average over every slice's samples."""
    merged.Clear()
    by_name: dict[str, Any] = {}
    weights: dict[str, float] = {}
    for power in per_slice:
        for component in power.power_component_metrics:
            weight = component.sample_count or 1
            if component.component_name not in by_name:
                by_name[component.component_name] = merged.power_component_metrics.add()
                by_name[component.component_name].CopyFrom(component)
                weights[component.component_name] = weight
                continue
            target = by_name[component.component_name]
            total = weights[component.component_name] + weight
            target.avg_power = (target.avg_power * weights[component.component_name]
                                + component.avg_power * weight) / total
            weights[component.component_name] = total
            for name in ("max_power", "max_moving_avg_power_100us", "max_moving_avg_power_1ms",
                         "max_moving_avg_power_10ms", "max_moving_avg_power_1s"):
                setattr(target, name, max(getattr(target, name), getattr(component, name)))
            target.sample_count += component.sample_count


def _fill_unset(messages: Sequence[Any], merged: Any) -> None:
    """``merged``: each field from the first of ``messages`` that sets it."""
    for message in messages:
        for field, value in message.ListFields():
            current = getattr(merged, field.name)
            if field.is_repeated:
                if not current:
                    current.extend(value)
            elif field.message_type is not None:
                if not merged.HasField(field.name):
                    current.CopyFrom(value)
            elif not current:
                setattr(merged, field.name, value)


# --- everything else -------------------------------------------------------------------------


def _merge_diagnostics(per_slice: Sequence[Any], merged: Any) -> None:
    for kind in ("info", "warnings", "errors"):
        seen: set[str] = set()
        for diagnostics in per_slice:
            for line in getattr(diagnostics, kind):
                if line not in seen:
                    seen.add(line)
                    getattr(merged, kind).append(line)


def _kernel_key(report: Any) -> tuple[Any, ...]:
    """XProf's order and identity of kernel reports (``KernelReportLessThanComparator``)."""
    return (report.name, *report.grid_dim, *report.block_dim, report.registers_per_thread,
            report.static_shmem_bytes, report.dynamic_shmem_bytes, report.is_kernel_using_tensor_core,
            report.is_op_tensor_core_eligible, report.op_name)


def _merge_kernel_reports(per_slice: Sequence[Any], merged: Any) -> None:
    """The same kernel's reports as one, then XProf's top kernels by total duration."""
    by_kernel: dict[tuple[Any, ...], Any] = {}
    for db in per_slice:
        for report in db.reports:
            key = _kernel_key(report)
            if key not in by_kernel:
                by_kernel[key] = type(report)()
                by_kernel[key].CopyFrom(report)
                continue
            target = by_kernel[key]
            target.min_duration_ns = min(target.min_duration_ns, report.min_duration_ns)
            target.max_duration_ns = max(target.max_duration_ns, report.max_duration_ns)
            target.total_duration_ns += report.total_duration_ns
            target.occurrences += report.occurrences
    ranked = sorted(by_kernel.items(), key=lambda item: (-item[1].total_duration_ns, item[0]))
    merged.reports.extend(report for _, report in ranked[:KERNEL_REPORTS_KEPT])


def _combined_compiler(first: int, second: int) -> int:
    """XProf's ``CombineCompilers``: one compiler if both agree or one is unknown, else mixed."""
    from xprof.protobuf import tf_function_pb2

    if first == tf_function_pb2.INVALID_COMPILER or first == second:
        return second
    if second == tf_function_pb2.INVALID_COMPILER:
        return first
    return tf_function_pb2.MIXED_COMPILER


def _merge_tf_functions(per_slice: Sequence[Any], merged: Any) -> None:
    from xprof.protobuf import tf_function_pb2

    expensive = {tf_function_pb2.TfFunctionExecutionMode.Value(mode) for mode in _TRACED_OR_EAGER}
    for db in per_slice:
        for name, function in db.tf_functions.items():
            if name not in merged.tf_functions:
                merged.tf_functions[name].CopyFrom(function)
                continue
            target = merged.tf_functions[name]
            target.total_tracing_count = max(target.total_tracing_count, function.total_tracing_count)
            target.compiler = _combined_compiler(target.compiler, function.compiler)
            for mode, metrics in function.metrics.items():
                target.metrics[mode].count += metrics.count
                target.metrics[mode].self_time_ps += metrics.self_time_ps
            total = sum(metrics.self_time_ps for metrics in target.metrics.values())
            costly = sum(metrics.self_time_ps for mode, metrics in target.metrics.items() if mode in expensive)
            target.expensive_call_percent = 100.0 * costly / total if total else 0.0


def _merge_source_stats(per_slice: Sequence[Any], merged: Any) -> None:
    """Per source line: totals summed, FLOPS utilization averaged over the line's time."""
    for stats in per_slice:
        for file_name, file_metrics in stats.file_name_to_metrics.items():
            lines = merged.file_name_to_metrics[file_name].line_number_to_metric
            for line_number, metric in file_metrics.line_number_to_metric.items():
                if line_number not in lines:
                    lines[line_number].CopyFrom(metric)
                    continue
                target = lines[line_number]
                time_ps = target.time_ps + metric.time_ps
                if time_ps:
                    target.flops_utilization = (target.flops_utilization * target.time_ps
                                                + metric.flops_utilization * metric.time_ps) / time_ps
                _add(metric, target, _SOURCE_LINE_SUMS)


def _average_performance_counters(per_slice: Sequence[Any], merged: Any) -> None:
    for name in ("matrix_unit_utilization_percent", "hbm_utilization_percent"):
        setattr(merged, name, sum(getattr(result, name) for result in per_slice) / len(per_slice))


def _merge_serving_latency(per_slice: Sequence[Any], merged: Any) -> None:
    """Average step times weighted by step counts; percentiles of the whole cannot be told from the slices'."""
    for times, count in (("prefill_step_time_us", "num_prefill_steps"), ("decode_step_time_us", "num_decode_steps")):
        total = sum(getattr(latency, count) for latency in per_slice)
        if total:
            weighted = sum(getattr(latency, times).avg * getattr(latency, count) for latency in per_slice)
            getattr(merged, times).avg = weighted / total
            setattr(merged, count, total)
