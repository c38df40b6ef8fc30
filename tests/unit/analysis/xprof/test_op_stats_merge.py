"""One host's OpStats merged from the OpStats of consecutive time slices.

Each merge rule on OpStats built by hand, then the whole thing on real
profiles: XProf's op_stats of a fixture, against the merge of XProf's op_stats
of its 2 and 3 time slices (cut by :func:`mldiag.analysis.profile.slices.slice_by_time`,
whose gaps between the slices the merge adds back), and the overview page XProf
reads from each.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from analysis_support import xplane
from xprof.protobuf import op_stats_pb2, tf_function_pb2

from mldiag.analysis.profile.slices import slice_by_time
from mldiag.analysis.xprof.op_stats_merge import KERNEL_REPORTS_KEPT, merge_time_slices


def merged(*slices: op_stats_pb2.OpStats) -> op_stats_pb2.OpStats:
    result = op_stats_pb2.OpStats()
    result.ParseFromString(merge_time_slices([part.SerializeToString() for part in slices]))
    return result


def with_ops(db_name: str, *ops: dict) -> op_stats_pb2.OpStats:
    op_stats = op_stats_pb2.OpStats()
    for op in ops:
        getattr(op_stats, db_name).metrics_db.add(**op)
    return op_stats


def ops_by_name(db) -> dict:
    return {op.name: op for op in db.metrics_db}


def with_steps(*numbers: int, **step_db) -> op_stats_pb2.OpStats:
    op_stats = op_stats_pb2.OpStats()
    for number in numbers:
        step = op_stats.step_db.step_sequence.add(step_num=number)
        step.step_info_per_core[1].step_num = number
        step.step_info_per_core[1].duration_ps = 1000 + number
    for name, value in step_db.items():
        setattr(op_stats.step_db, name, value)
    return op_stats


# --- arguments -------------------------------------------------------------------------------


def test_no_slices_is_an_error():
    with pytest.raises(ValueError, match="at least one time slice"):
        merge_time_slices([])


def test_bytes_that_are_not_op_stats_are_named_by_their_slice():
    with pytest.raises(ValueError, match="time slice 1 is not a serialized OpStats"):
        merge_time_slices([op_stats_pb2.OpStats().SerializeToString(), b"\xff\xff\xff"])


def test_one_slice_merges_to_itself():
    op_stats = with_ops("device_op_metrics_db", dict(name="fusion", occurrences=3, num_cores=4, self_time_ps=9))
    op_stats.run_environment.hostnames["host"] = True
    op_stats.run_environment.device_core_count = 4
    op_stats.kernel_stats_db.reports.add(name="k", total_duration_ns=5)
    data = op_stats.SerializeToString()

    assert merge_time_slices([data]) == data


# --- op metrics ------------------------------------------------------------------------------


def test_an_op_in_several_slices_adds_up_and_keeps_its_fastest_run():
    first = with_ops("device_op_metrics_db", dict(
        hlo_module_id=7, name="fusion.1", occurrences=2, time_ps=40, self_time_ps=30, min_time_ps=15, flops=100,
        bytes_accessed=10, num_cores=4, is_eager=False))
    second = with_ops("device_op_metrics_db", dict(
        hlo_module_id=7, name="fusion.1", occurrences=3, time_ps=33, self_time_ps=27, min_time_ps=9, flops=150,
        bytes_accessed=15, num_cores=4, is_eager=True, category="fusion"))

    op = ops_by_name(merged(first, second).device_op_metrics_db)["fusion.1"]

    assert (op.occurrences, op.time_ps, op.self_time_ps, op.flops, op.bytes_accessed) == (5, 73, 57, 250, 25)
    assert op.min_time_ps == 9
    assert op.is_eager and op.category == "fusion"


def test_an_op_runs_on_the_cores_of_the_host_not_on_the_cores_of_every_slice():
    first = with_ops("device_op_metrics_db", dict(name="fusion", occurrences=1, num_cores=2))
    second = with_ops("device_op_metrics_db", dict(name="fusion", occurrences=1, num_cores=4))

    assert ops_by_name(merged(first, second).device_op_metrics_db)["fusion"].num_cores == 4


def test_ops_of_different_programs_stay_apart_and_db_totals_add_up():
    first = with_ops("host_op_metrics_db", dict(hlo_module_id=1, name="dot", occurrences=1, self_time_ps=5))
    first.host_op_metrics_db.total_time_ps, first.host_op_metrics_db.total_op_time_ps = 100, 5
    first.host_op_metrics_db.precision_stats.compute_16bit_ps = 3
    second = with_ops("host_op_metrics_db", dict(hlo_module_id=2, name="dot", occurrences=1, self_time_ps=6))
    second.host_op_metrics_db.total_time_ps, second.host_op_metrics_db.total_op_time_ps = 50, 6
    second.host_op_metrics_db.precision_stats.compute_16bit_ps = 4

    db = merged(first, second).host_op_metrics_db

    assert sorted((op.hlo_module_id, op.self_time_ps) for op in db.metrics_db) == [(1, 5), (2, 6)]
    assert (db.total_time_ps, db.total_op_time_ps, db.precision_stats.compute_16bit_ps) == (150, 11, 7)


def test_memory_traffic_adds_up_per_memory_space_and_direction():
    first = with_ops("device_op_metrics_db", dict(name="copy", occurrences=1))
    first.device_op_metrics_db.metrics_db[0].memory_accessed_breakdown.add(memory_space=1, bytes_accessed=10)
    second = with_ops("device_op_metrics_db", dict(name="copy", occurrences=1))
    second.device_op_metrics_db.metrics_db[0].memory_accessed_breakdown.add(memory_space=1, bytes_accessed=5)
    second.device_op_metrics_db.metrics_db[0].memory_accessed_breakdown.add(memory_space=2, bytes_accessed=1)

    breakdown = ops_by_name(merged(first, second).device_op_metrics_db)["copy"].memory_accessed_breakdown

    assert sorted((access.memory_space, access.bytes_accessed) for access in breakdown) == [(1, 15), (2, 1)]


def test_the_complete_steps_database_is_merged_like_the_others():
    first = with_ops("hlo_metrics_db_complete_steps_only", dict(name="fusion", occurrences=2, self_time_ps=8))
    second = with_ops("hlo_metrics_db_complete_steps_only", dict(name="fusion", occurrences=1, self_time_ps=4))

    op = ops_by_name(merged(first, second).hlo_metrics_db_complete_steps_only)["fusion"]

    assert (op.occurrences, op.self_time_ps) == (3, 12)


def test_flat_ops_combine_by_name_keep_each_fusion_child_and_drop_nested_idle():
    slices = []
    for self_time_ps in (10, 20):
        op_stats = op_stats_pb2.OpStats()
        db = op_stats.flat_device_op_metrics_db
        db.total_time_ps = 100
        db.op_instances.add(hlo_module_id=1, hlo_name="fusion", occurrences=1, self_time_ps=self_time_ps)
        db.op_instances.add(hlo_module_id=1, hlo_name="add", is_fusion_child=True, occurrences=1)
        db.op_instances.add(hlo_name="IDLE", category="IDLE", parent_op_id=3, occurrences=1)
        slices.append(op_stats)

    db = merged(*slices).flat_device_op_metrics_db

    assert [(op.hlo_name, op.self_time_ps) for op in db.op_instances if not op.is_fusion_child] == [("fusion", 30)]
    assert sum(op.is_fusion_child for op in db.op_instances) == 2
    assert db.total_time_ps == 200


# --- time between the slices ----------------------------------------------------------------


def timed(db_name: str, total_time_ps: int, op_time_ps: int, **duty_cycle: int) -> op_stats_pb2.OpStats:
    """OpStats whose database ``db_name`` holds one op and XProf's IDLE op for the rest of its total time."""
    op_stats = op_stats_pb2.OpStats()
    db = getattr(op_stats, db_name)
    db.total_time_ps, db.total_op_time_ps = total_time_ps, op_time_ps
    for name, value in duty_cycle.items():
        setattr(db, name, value)
    if db_name.startswith("flat"):
        db.op_instances.add(hlo_name="fusion", occurrences=1, self_time_ps=op_time_ps, time_ps=op_time_ps)
        db.op_instances.add(hlo_name="IDLE", category="IDLE", self_time_ps=total_time_ps - op_time_ps,
                            time_ps=total_time_ps - op_time_ps)
    else:
        db.metrics_db.add(name="fusion", occurrences=1, self_time_ps=op_time_ps, time_ps=op_time_ps)
        db.metrics_db.add(name="IDLE", category="IDLE", self_time_ps=total_time_ps - op_time_ps,
                          time_ps=total_time_ps - op_time_ps)
    return op_stats


def merged_with_gaps(gaps_ps: dict, *slices: op_stats_pb2.OpStats) -> op_stats_pb2.OpStats:
    result = op_stats_pb2.OpStats()
    result.ParseFromString(merge_time_slices([part.SerializeToString() for part in slices], gaps_ps=gaps_ps))
    return result


def idle_op(ops) -> tuple[int, int]:
    (idle,) = [op for op in ops if op.category == "IDLE"]
    return idle.time_ps, idle.self_time_ps


def test_the_time_between_slices_goes_into_the_device_total_and_its_idle_op():
    result = merged_with_gaps({"device": 25, "host": 7}, timed("device_op_metrics_db", 100, 60),
                              timed("device_op_metrics_db", 50, 30))

    db = result.device_op_metrics_db
    assert (db.total_time_ps, db.total_op_time_ps) == (175, 90)
    assert idle_op(db.metrics_db) == (85, 85)  # XProf's IDLE op: the total time less the op time


def test_the_time_between_slices_on_the_host_goes_into_the_host_database_only():
    result = merged_with_gaps({"device": 25, "host": 7}, timed("host_op_metrics_db", 100, 60),
                              timed("host_op_metrics_db", 50, 30))

    db = result.host_op_metrics_db
    assert (db.total_time_ps, idle_op(db.metrics_db)) == (157, (67, 67))
    assert result.device_op_metrics_db.total_time_ps == 0


def test_the_flat_device_database_takes_the_device_gap_on_its_top_level_idle_op():
    slices = [timed("flat_device_op_metrics_db", 100, 60), timed("flat_device_op_metrics_db", 50, 30)]

    db = merged_with_gaps({"device": 25}, *slices).flat_device_op_metrics_db

    assert db.total_time_ps == 175
    assert idle_op(db.op_instances) == (85, 85)


def test_a_tpu_duty_cycle_counts_the_time_between_slices_as_idle():
    duty_cycle = dict(busy_time_ps=60, idle_time_ps=40, busy_time_high_confidence_ps=50,
                      idle_time_high_confidence_ps=50)
    result = merged_with_gaps({"device": 25}, timed("device_op_metrics_db", 100, 60, **duty_cycle),
                              timed("device_op_metrics_db", 100, 60, **duty_cycle))

    db = result.device_op_metrics_db
    assert (db.busy_time_ps, db.idle_time_ps) == (120, 105)
    assert (db.busy_time_high_confidence_ps, db.idle_time_high_confidence_ps) == (100, 125)


def test_a_tpu_duty_cycle_takes_the_time_between_the_slices_ops_where_it_is_known():
    duty_cycle = dict(busy_time_ps=60, idle_time_ps=40, busy_time_high_confidence_ps=50,
                      idle_time_high_confidence_ps=50)
    result = merged_with_gaps({"device": 25, "device_ops": 10},
                              timed("device_op_metrics_db", 100, 60, **duty_cycle),
                              timed("device_op_metrics_db", 100, 60, **duty_cycle))

    db = result.device_op_metrics_db
    assert (db.total_time_ps, idle_op(db.metrics_db)) == (225, (105, 105))  # the total takes the planes' gap
    assert (db.busy_time_ps, db.idle_time_ps) == (120, 90)
    assert (db.busy_time_high_confidence_ps, db.idle_time_high_confidence_ps) == (100, 110)


def test_a_database_without_a_duty_cycle_does_not_get_one():
    db = merged_with_gaps({"device": 25}, timed("device_op_metrics_db", 100, 60),
                          timed("device_op_metrics_db", 50, 30)).device_op_metrics_db

    assert (db.busy_time_ps, db.idle_time_ps, db.idle_time_high_confidence_ps) == (0, 0, 0)


def test_an_idle_op_is_added_where_the_slices_had_none():
    slices = [with_ops("device_op_metrics_db", dict(name="fusion", occurrences=1, self_time_ps=10))
              for _ in range(2)]
    for part in slices:
        part.device_op_metrics_db.total_time_ps = part.device_op_metrics_db.total_op_time_ps = 10

    db = merged_with_gaps({"device": 5}, *slices).device_op_metrics_db

    assert db.total_time_ps == 25
    assert [(op.name, op.time_ps) for op in db.metrics_db if op.category == "IDLE"] == [("IDLE", 5)]


def test_databases_that_no_slice_timed_and_complete_steps_take_no_gap():
    slices = [timed("hlo_metrics_db_complete_steps_only", 100, 60) for _ in range(2)]

    result = merged_with_gaps({"device": 25, "host": 7}, *slices)

    assert result.hlo_metrics_db_complete_steps_only.total_time_ps == 200  # built from steps, not spans
    assert (result.device_op_metrics_db.total_time_ps, len(result.device_op_metrics_db.metrics_db)) == (0, 0)
    assert (result.host_op_metrics_db.total_time_ps, len(result.host_op_metrics_db.metrics_db)) == (0, 0)


@pytest.mark.parametrize("gaps_ps,message", [
    ({"devices": 1}, "unknown kind of gap between time slices: devices"),
    ({"device": -1}, "the device gap between time slices must be a whole number of picoseconds"),
    ({"host": 1.5}, "the host gap between time slices must be a whole number of picoseconds"),
])
def test_gaps_are_a_known_kind_and_a_time(gaps_ps, message):
    with pytest.raises(ValueError, match=message):
        merge_time_slices([b"", b""], gaps_ps=gaps_ps)


def test_a_single_slice_has_no_time_between_slices():
    with pytest.raises(ValueError, match="single time slice has no time between slices"):
        merge_time_slices([b""], gaps_ps={"device": 1})
    assert merge_time_slices([b""], gaps_ps={"device": 0, "host": 0}) == b""


# --- steps -----------------------------------------------------------------------------------


def test_steps_follow_each_other_and_are_renumbered_when_a_slice_counts_again():
    result = merged(with_steps(0, 1, 2), with_steps(0, 1), with_steps(1, 2))

    numbers = [step.step_num for step in result.step_db.step_sequence]
    assert numbers == [0, 1, 2, 3, 4, 5, 6]
    assert [step.step_info_per_core[1].step_num for step in result.step_db.step_sequence] == numbers
    assert [step.step_info_per_core[1].duration_ps for step in result.step_db.step_sequence] == [
        1000, 1001, 1002, 1000, 1001, 1001, 1002]


def test_step_numbers_that_already_follow_on_are_kept():
    result = merged(with_steps(10, 11), with_steps(12, 14))

    assert [step.step_num for step in result.step_db.step_sequence] == [10, 11, 12, 14]


def test_step_flags_of_any_slice_hold_for_the_host_and_dropped_steps_add_up():
    step_db = merged(with_steps(1, use_incomplete_step=True, num_steps_dropped=2),
                     with_steps(1, empty_intersect=True, num_steps_dropped=3)).step_db

    assert (step_db.use_incomplete_step, step_db.empty_intersect, step_db.num_steps_dropped) == (True, True, 5)


# --- run and perf environment ----------------------------------------------------------------


def environment(**fields) -> op_stats_pb2.OpStats:
    op_stats = op_stats_pb2.OpStats()
    op_stats.run_environment.hostnames["worker-0"] = True
    for name, value in {"host_count": 1, "task_count": 1, **fields}.items():
        setattr(op_stats.run_environment, name, value)
    return op_stats


def test_the_slices_are_still_one_host_with_its_own_devices():
    gpu = dict(device_type="GPU", device_core_count=8, hardware_type=2, replica_count=1)
    result = merged(environment(**gpu, is_training=False), environment(**gpu, is_training=True)).run_environment

    assert list(result.hostnames) == ["worker-0"]
    assert (result.host_count, result.task_count, result.device_core_count) == (1, 1, 8)
    assert (result.device_type, result.hardware_type, result.is_training) == ("GPU", 2, True)


def test_the_accelerator_wins_over_a_slice_that_saw_only_the_cpu():
    result = merged(environment(device_type="CPU", hardware_type=1),
                    environment(device_type="TPU v6 Lite", device_core_count=4, hardware_type=3),
                    environment(device_type="CPU", hardware_type=1)).run_environment

    assert (result.device_type, result.device_core_count, result.hardware_type) == ("TPU v6 Lite", 4, 3)


def test_job_information_is_kept_once():
    first, second = environment(), environment()
    second.run_environment.host_independent_job_info.profile_duration_ms = 2000
    for op_stats in (first, second):
        op_stats.run_environment.host_dependent_job_info.add(host_id="worker-0", command_line="train.py")

    result = merged(first, second).run_environment

    assert result.host_independent_job_info.profile_duration_ms == 2000
    assert len(result.host_dependent_job_info) == 1


def test_power_is_averaged_over_every_sample_and_its_peak_kept():
    first, second = environment(), environment()
    first.run_environment.power_metrics.power_component_metrics.add(
        component_name="chip", avg_power=100, max_power=150, sample_count=3)
    second.run_environment.power_metrics.power_component_metrics.add(
        component_name="chip", avg_power=200, max_power=250, sample_count=1)

    (chip,) = merged(first, second).run_environment.power_metrics.power_component_metrics

    assert (chip.avg_power, chip.max_power, chip.sample_count) == (125, 250, 4)


def test_the_perf_environment_takes_each_figure_from_the_first_slice_that_has_it():
    first, second = op_stats_pb2.OpStats(), op_stats_pb2.OpStats()
    first.perf_env.peak_tera_flops_per_second = 918
    second.perf_env.peak_tera_flops_per_second = 1
    second.perf_env.peak_bws_giga_bytes_per_second.extend([1638.0, 23296.0])
    second.perf_env.has_megacore = True

    perf_env = merged(first, second).perf_env

    assert perf_env.peak_tera_flops_per_second == 918
    assert list(perf_env.peak_bws_giga_bytes_per_second) == [1638.0, 23296.0]
    assert perf_env.has_megacore


def test_cores_programs_and_diagnostics_are_each_kept_once():
    first, second = op_stats_pb2.OpStats(), op_stats_pb2.OpStats()
    first.core_id_to_details[2].hostname = "worker-0"
    second.core_id_to_details[2].hostname = "worker-0"
    second.core_id_to_details[10].hostname = "worker-0"
    first.program_id_to_name_map[5] = "jit_step"
    second.program_id_to_name_map[6] = "jit_eval"
    first.diagnostics.warnings.append("No step marker observed")
    second.diagnostics.warnings.extend(["No step marker observed", "Device trace is incomplete"])

    result = merged(first, second)

    assert sorted(result.core_id_to_details) == [2, 10]
    assert dict(result.program_id_to_name_map) == {5: "jit_step", 6: "jit_eval"}
    assert list(result.diagnostics.warnings) == ["No step marker observed", "Device trace is incomplete"]


# --- kernels, functions, sources, counters ---------------------------------------------------


def kernels(*reports: dict) -> op_stats_pb2.OpStats:
    op_stats = op_stats_pb2.OpStats()
    for report in reports:
        op_stats.kernel_stats_db.reports.add(grid_dim=[1, 1, 1], block_dim=[128, 1, 1], **report)
    return op_stats


def test_reports_of_one_kernel_become_one_ranked_by_total_duration():
    first = kernels(dict(name="gemm", op_name="dot", occurrences=2, total_duration_ns=20, min_duration_ns=8,
                         max_duration_ns=12),
                    dict(name="relu", op_name="max", occurrences=1, total_duration_ns=25))
    second = kernels(dict(name="gemm", op_name="dot", occurrences=1, total_duration_ns=15, min_duration_ns=15,
                          max_duration_ns=15))

    reports = merged(first, second).kernel_stats_db.reports

    assert [(report.name, report.occurrences, report.total_duration_ns) for report in reports] == [
        ("gemm", 3, 35), ("relu", 1, 25)]
    assert (reports[0].min_duration_ns, reports[0].max_duration_ns) == (8, 15)


def test_only_the_longest_kernels_are_kept():
    many = kernels(*(dict(name=f"k{index}", total_duration_ns=index) for index in range(KERNEL_REPORTS_KEPT + 5)))

    reports = merged(many, op_stats_pb2.OpStats()).kernel_stats_db.reports

    assert len(reports) == KERNEL_REPORTS_KEPT
    assert reports[0].total_duration_ns == KERNEL_REPORTS_KEPT + 4
    assert reports[-1].total_duration_ns == 5


def tf_function(compiler: int, mode: int, self_time_ps: int) -> op_stats_pb2.OpStats:
    op_stats = op_stats_pb2.OpStats()
    function = op_stats.tf_function_db.tf_functions["train_step"]
    function.compiler, function.total_tracing_count = compiler, 1
    function.metrics[mode].count, function.metrics[mode].self_time_ps = 1, self_time_ps
    return op_stats


def test_tf_functions_add_up_per_mode_and_report_a_mix_of_compilers():
    result = merged(tf_function(tf_function_pb2.XLA_COMPILER, tf_function_pb2.TRACED_MODE, 30),
                    tf_function(tf_function_pb2.OTHER_COMPILER, tf_function_pb2.NOT_TRACED_MODE, 70))

    function = result.tf_function_db.tf_functions["train_step"]
    assert function.compiler == tf_function_pb2.MIXED_COMPILER
    assert {mode: metrics.self_time_ps for mode, metrics in function.metrics.items()} == {
        tf_function_pb2.TRACED_MODE: 30, tf_function_pb2.NOT_TRACED_MODE: 70}
    assert function.expensive_call_percent == pytest.approx(30.0)


def test_source_lines_add_up_and_their_utilization_is_time_weighted():
    slices = []
    for time_ps, utilization in ((100, 0.5), (300, 0.1)):
        op_stats = op_stats_pb2.OpStats()
        line = op_stats.source_stats.file_name_to_metrics["model.py"].line_number_to_metric[12]
        line.occurrences, line.time_ps, line.self_time_ps, line.flops_utilization = 1, time_ps, time_ps, utilization
        slices.append(op_stats)

    line = merged(*slices).source_stats.file_name_to_metrics["model.py"].line_number_to_metric[12]

    assert (line.occurrences, line.time_ps) == (2, 400)
    assert line.flops_utilization == pytest.approx(0.2)


def test_counters_are_averaged_and_serving_step_times_weighted_by_steps():
    first, second = op_stats_pb2.OpStats(), op_stats_pb2.OpStats()
    first.performance_counter_result.hbm_utilization_percent = 40
    second.performance_counter_result.hbm_utilization_percent = 60
    first.disaggregated_serving_latency.decode_step_time_us.avg = 10
    first.disaggregated_serving_latency.num_decode_steps = 3
    second.disaggregated_serving_latency.decode_step_time_us.avg = 30
    second.disaggregated_serving_latency.num_decode_steps = 1
    second.disaggregated_serving_latency.prefill_step_time_us.avg = 500
    second.disaggregated_serving_latency.num_prefill_steps = 2

    result = merged(first, second)

    assert result.performance_counter_result.hbm_utilization_percent == 50
    serving = result.disaggregated_serving_latency
    assert (serving.decode_step_time_us.avg, serving.num_decode_steps) == (15, 4)
    assert (serving.prefill_step_time_us.avg, serving.num_prefill_steps) == (500, 2)


# --- real profiles ---------------------------------------------------------------------------

PROFILES_WITH_SLICES = ("plain_loop", "ondemand_mlp", "host_between_steps", "gpu_v100x8_tf_bert_multiworker",
                        "tpu_v6e4_inference", "mi300x_jax08_attention")
STEP_MEAN_TOLERANCE = 0.05
# The device total is each device plane's span, summed: with the gaps it comes back to within 2e-6 (a TPU's
# slices overlap by the few modules that run across a cut), exactly on the GPUs.
DEVICE_TOTAL_TOLERANCE = 1e-5
# The host total is each host thread's span of TensorFlow ops, summed, while the gaps are the host plane's:
# the merged total stays under the whole's, by up to 65% (MI300X, 3 slices: 35.2% of it left).
HOST_TOTAL_KEPT = 0.34
# Idle time and duty cycle, in percentage points, as XProf's overview page shows them (on a TPU) and as it
# computes the idle share (1 - op time / total time): the device idle time is exact to the page's display,
# the TPU duty cycle within 0.8 (86.5% whole, 85.8% from 3 slices) and the host idle time within 4.3 (MI300X,
# 3 slices: 97.7% whole, 93.4%).
FIGURE_POINTS = {"device_idle_time_percent": 0.1, "device_duty_cycle_percent": 1.0, "host_idle_time_percent": 4.5}


def xprof_op_stats(profile: Path, folder: Path) -> bytes:
    """XProf's OpStats of one ``.xplane.pb``, as its op_stats converters cache them."""
    from xprof.convert import raw_to_tool_data

    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / profile.name
    shutil.copyfile(profile, copy)
    raw_to_tool_data.xspace_to_tool_data([os.fspath(copy)], "op_profile", {"use_saved_result": True})
    return (folder / "ALL_HOSTS.op_stats_v2.pb").read_bytes()


def parsed(data: bytes) -> op_stats_pb2.OpStats:
    op_stats = op_stats_pb2.OpStats()
    op_stats.ParseFromString(data)
    return op_stats


def op_time(db) -> tuple[int, int, int]:
    ops = [op for op in db.metrics_db if op.name != "IDLE"]
    return db.total_op_time_ps, sum(op.self_time_ps for op in ops), sum(op.occurrences for op in ops)


def top_ops(db, count: int = 5) -> list[str]:
    return [op.name for op in sorted(db.metrics_db, key=lambda op: -op.self_time_ps) if op.name != "IDLE"][:count]


def step_durations(op_stats) -> dict[int, int]:
    """Each step's duration by when it began: the identity of a step in both the whole and the slices."""
    return {info.begin_ps: info.duration_ps
            for step in op_stats.step_db.step_sequence for info in step.step_info_per_core.values()}


def idle_percent(db) -> float:
    """XProf's ``IdleTimeRatio`` of a database, as a percentage."""
    return 100.0 * (1 - db.total_op_time_ps / db.total_time_ps) if db.total_time_ps else 0.0


def overview_figures(folder: Path) -> dict[str, float]:
    """The idle and duty-cycle percentages of XProf's overview page (a TPU's only), from the op_stats in
    ``folder``."""
    from xprof.convert import raw_to_tool_data

    (profile,) = folder.glob("*.xplane.pb")
    data, _ = raw_to_tool_data.xspace_to_tool_data([os.fspath(profile)], "overview_page", {"use_saved_result": True})
    properties = json.loads(data)[0]["p"]
    return {name: float(properties[name].rstrip("%")) for name in FIGURE_POINTS if name in properties}


@pytest.mark.slow
@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("name", PROFILES_WITH_SLICES)
def test_the_merged_slices_of_a_profile_match_the_whole(name, count, tmp_path):
    profile = xplane(name)
    whole = parsed(xprof_op_stats(profile, tmp_path / "whole"))
    slices = slice_by_time(profile, count, tmp_path)
    gaps_ps = {"device": 1000 * slices.gaps_ns("/device:"), "host": 1000 * slices.gaps_ns("/host:")}
    parts = [xprof_op_stats(part, tmp_path / f"slice-{index}") for index, part in enumerate(slices.paths)]
    merged_bytes = merge_time_slices(parts, gaps_ps=gaps_ps)
    result = parsed(merged_bytes)

    # Every op event is in exactly one slice, so op time and counts add up exactly.
    assert op_time(result.host_op_metrics_db) == op_time(whole.host_op_metrics_db)
    assert op_time(result.device_op_metrics_db) == op_time(whole.device_op_metrics_db)
    assert top_ops(result.host_op_metrics_db) == top_ops(whole.host_op_metrics_db)
    assert top_ops(result.device_op_metrics_db) == top_ops(whole.device_op_metrics_db)
    assert sum(report.total_duration_ns for report in result.kernel_stats_db.reports) == sum(
        report.total_duration_ns for report in whole.kernel_stats_db.reports)
    for field in ("device_type", "hardware_type", "host_count", "device_core_count"):
        assert getattr(result.run_environment, field) == getattr(whole.run_environment, field)

    # The time between the slices is back in the totals.
    assert result.device_op_metrics_db.total_time_ps == pytest.approx(whole.device_op_metrics_db.total_time_ps,
                                                                      rel=DEVICE_TOTAL_TOLERANCE)
    whole_host_total = whole.host_op_metrics_db.total_time_ps
    assert HOST_TOTAL_KEPT * whole_host_total <= result.host_op_metrics_db.total_time_ps <= whole_host_total
    (tmp_path / "merged").mkdir()
    shutil.copyfile(profile, tmp_path / "merged" / profile.name)
    (tmp_path / "merged" / "ALL_HOSTS.op_stats_v2.pb").write_bytes(merged_bytes)
    figures, whole_figures = overview_figures(tmp_path / "merged"), overview_figures(tmp_path / "whole")
    assert figures.keys() == whole_figures.keys()
    for figure, value in figures.items():
        assert value == pytest.approx(whole_figures[figure], abs=FIGURE_POINTS[figure]), figure
    assert idle_percent(result.device_op_metrics_db) == pytest.approx(
        idle_percent(whole.device_op_metrics_db), abs=FIGURE_POINTS["device_idle_time_percent"])
    assert idle_percent(result.host_op_metrics_db) == pytest.approx(
        idle_percent(whole.host_op_metrics_db), abs=FIGURE_POINTS["host_idle_time_percent"])

    numbers = [step.step_num for step in result.step_db.step_sequence]
    assert numbers == sorted(set(numbers))
    steps, whole_steps = step_durations(result), step_durations(whole)
    assert all(steps[begin] == whole_steps[begin] for begin in steps.keys() & whole_steps.keys())
    assert abs(len(steps) - len(whole_steps)) <= 2 * (count - 1)
    if whole_steps:
        mean, whole_mean = sum(steps.values()) / len(steps), sum(whole_steps.values()) / len(whole_steps)
        assert mean == pytest.approx(whole_mean, rel=STEP_MEAN_TOLERANCE)
