"""The deterministic analyst: key metrics, a health snapshot and prioritised findings.

It reads only the evidence (raw-event signals, the 15 tools, the HLO
detectors) and applies fixed rules, so the same profile always gives the same
report, offline and without a reasoning model. The rules in short:

* **input_bound**: the compute lanes sit idle waiting for the host: in a
  step-marked loop that dispatches little and does not compile, all of its idle
  time; elsewhere, the host's own named work (a data loader) and the time
  between steps;
* **dispatch_overhead**: many jit dispatches per step (op-by-op execution); or a
  few, each launching a program so small that the launch (the dispatch, with the
  training thread's untraced time and syncs around it) costs the host several
  times what the device spends running it, or is awaited every step so that
  nothing overlaps it (:mod:`~mldiag.analysis.rules.launches`);
* **recompilation**: compilation inside steps of a function that compiled
  before, or after the warm-up, with the functions whose parameter shapes
  differ between their compiled programs, costing what the recompiling steps
  take beyond a normal step (tracing, lowering, compiling and the first run);
  a program's first compilation in the loop's first steps is **warm-up**, a P2
  with its cost, and the headline step time is the steady state after it;
* **slow steps**: a group of steps well above the median, the function that
  runs longer in them named, ranked by its share of the loop like idle time;
* **communication**, **memory**, **compute**, **kernel**, **compiler**: from the
  device ops, the memory profile, the roofline model, custom-call share and the
  HLO detectors; memory also when a program's temporaries dwarf its inputs and
  outputs (its HLO against its memory_viewer peak);
* **data_movement**: device time in dtype converts, layout transposes and
  copies between host and device memory; in op-by-op execution, where the
  devices mostly wait for launches, ranked by their share of the step;
* **where device time goes**: a kernel holding at least 30% of a host's device
  op time is named, with the next ones of 10% or more and what their HLO
  computes, in the findings that explain device time (op-by-op launches, the
  programs of a capture without steps, the roofline);
* **OPTIMAL** when compute is high, idle, communication, compilation and OOM
  risk are low, and no finding is P0 or P1.

Titles and the summary hold numbers and fixed words only; names that come from
the profile (op, module, annotation names) appear only inside ``evidence``,
quoted, so they stay data wherever the report goes.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from functools import partial
from typing import Any, NamedTuple

from mldiag.analysis.evidence import (
    Analysis,
    DataMovement,
    Health,
    HloIssue,
    HloProgram,
    KernelShare,
    Metrics,
    ProfileInput,
    ToolResult,
    ToolStatus,
)
from mldiag.analysis.host_evidence import (
    DeviceKind,
    HostActivity,
    HostEvidence,
    OpTime,
    ProgramCalls,
    SlowSteps,
    StepSource,
    TimeCause,
    TimePart,
)
from mldiag.analysis.loop import read_loops
from mldiag.analysis.profile.trace_names import (
    ASYNC_COPY,
    COMPILE,
    CPU_HOST_TO_DEVICE,
    DISPATCH_PREFIX,
    HOST_CALLBACK,
    HOST_CALLBACK_PART,
    HOST_MEMORY_SPACE,
    THREAD_WAITING,
    WAITING,
    collective,
    transfer_direction,
)
from mldiag.analysis.profile.trace_names import hlo_instruction as _instruction
from mldiag.analysis.profile.trace_names import program_base as _module_base
from mldiag.analysis.rules import (decoding, frameworks, host_causes, jacobians, kronecker, launches,
                                   linear_algebra, masked_results, matrix_unit, pairwise, per_example_weights,
                                   precision, product_order, roofline, running_sums, sparse_updates, subsampling,
                                   unfold, zeroed_work)
from mldiag.analysis.rules import kernels as kernel_ops
from mldiag.analysis.rules.frameworks import Framework
from mldiag.analysis.rules.host_causes import HostCause
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, Shape, describe
from mldiag.domain.resources import Finding, FindingCategory, HealthStatus, Priority

GIB = 1 << 30
MIB = 1 << 20
# Health: OPTIMAL needs all of these.
HIGH_COMPUTE = 0.80
LOW_COMMUNICATION = 0.10
LOW_COMPILE = 0.05
SAFE_MEMORY = 0.90
# Idle share of a step at which host-side work becomes a P0 / P1 / P2 problem.
IDLE_PRIORITIES = ((0.50, Priority.P0), (0.25, Priority.P1), (0.10, Priority.P2))
# Share of the loop at which the costliest host cause, named by the function that holds it with a fix of its own
# (a synchronous save, a sync every step, a slow loader, batch-making on the training thread, a round trip through
# the host), is the P0 of a loop that runs one program per step (op-by-op and compiling loops have findings of
# their own): the change it asks for is small and its gain is known.
NAMED_CAUSE_P0 = 0.10
NAMED_CAUSES = frozenset({HostCause.CHECKPOINT, HostCause.DEVICE_SYNC, HostCause.LOGGING, HostCause.PRODUCER_THREAD,
                          HostCause.CONSUMER_THREAD, HostCause.BATCH_MAKING, HostCause.ROUND_TRIP,
                          HostCause.INTERPRETER_LOCK, HostCause.HOST_RANDOM})
# Device work per slow step, as a multiple of a normal step's, up to which the slow steps do no more on the devices.
SAME_DEVICE_WORK = 1.2
OP_BY_OP_DISPATCHES = 50  # jit dispatches per step that mean the step is not one program
DISPATCH_ORIGIN_FLOOR = 0.1  # share of the dispatches a function makes for the op-by-op finding to name it
# Share of a step's dispatches that launch one function for them to be that function called over and over (once
# per example), not op-by-op execution of many different operations.
ONE_FUNCTION_SHARE = 0.75
MAX_DISPATCH_ORIGINS = 3
OFTEN_DISPATCHED = 10  # op-by-op dispatches per step of one kind of data-moving op
COMPILE_PRIORITIES = ((0.25, Priority.P0), (0.05, Priority.P1), (0.0, Priority.P2))
COMMUNICATION_PRIORITIES = ((0.30, Priority.P0), (0.15, Priority.P1), (0.05, Priority.P2))
MEMORY_PRIORITIES = ((0.95, Priority.P0), (0.85, Priority.P1))
ROOFLINE_PRIORITIES = ((0.10, Priority.P1), (0.30, Priority.P2))
NEAR_PEAK = 0.5  # share of the chip's peak FLOP/s or HBM bandwidth that is near it, whatever a cost model says
CUSTOM_CALL_SHARE = 30.0  # percent of device time in custom calls worth a kernel finding
# Ops run at least LOOP_RUNS times a step for at most TINY_OP_US each, together this share of the busy time: a
# loop's body too small for the per-op cost (an XLA op costs a few microseconds to run at all on a CPU or GPU).
LOOP_RUNS = 100
TINY_OP_US = 20.0
TINY_LOOP_SHARE = 0.5
TINY_LOOP_P0 = 0.8  # of the loop's time in a loop's tiny ops, from which they are its main problem
# A program whose temporaries at its peak are this many times its inputs and outputs, and at least this big.
TEMPORARIES_RATIO = 4.0
TEMPORARIES_FLOOR = 16 * MIB
MAX_TITLE_RATIO = 1000  # a larger ratio is said in words, with the sizes: its denominator is near nothing
# Share of device op time in ops that only move or re-type data at which they are a P0 / P1 / P2 problem.
DATA_MOVEMENT_PRIORITIES = ((0.50, Priority.P0), (0.25, Priority.P1), (0.10, Priority.P2))
COPY_SHARE_OF_AN_UPDATE = 0.5  # of a program's device time in copies of its arguments: an out-of-place update
DOMINANT_KERNEL = 0.30  # share of a host's device op time at which a kernel is named where device time is explained
NAMED_BESIDE = 0.10  # the kernels after a dominant one named with it, down to this share
MAX_KERNELS_NAMED = 3
OUTLIER_STEP = 3.0  # a step this many times the median is an outlier
NOTABLE_SHARE = 0.01  # host activities below this share of a step are not worth quoting
UNTRACED_SHARE = 1 / 3  # the training thread's untraced time is a cause of its own from this share of the loop
IN_FLIGHT_SHARE = 0.1  # share of the training thread's copies' time beyond its calls that says they waited in flight
MANY_PARAMETERS = 32  # a program taking this many arrays pays for handing each over at every launch
# Eager programs whose shapes are a count the data decides: the gather of boolean-mask indexing, nonzero and argwhere.
GROWING_STEPS = 8  # steps from which dispatches or step times that grow each step tell work that grows with the run
STEADY_GROWTH = 0.8  # share of the steps that grow (by the same count of dispatches) for the growth to be steady
# Host causes whose work can grow with the run (a buffer or list the training thread copies whole every step).
GROWING_WORK = frozenset({HostCause.BATCH_MAKING, HostCause.HOST_WORK, HostCause.ROUND_TRIP, HostCause.LOGGING})
SHAPES_LISTED = 4  # a parameter's shapes across compilations quoted in full up to this many
GROWING_COMPILATIONS = 3  # compilations of one function, one per consecutive size, that tell a growing collection
DATA_SIZED = ("jit_gather", "jit_nonzero", "jit__nonzero", "jit_argwhere")
# The jnp functions whose result's size is the data's unless given size=, by a word of the programs they compile.
SIZED_BY_DATA = {"unique": "jnp.unique(x, size=k, fill_value=...)", "nonzero": "jnp.nonzero(mask, size=k)",
                 "argwhere": "jnp.argwhere(mask, size=k)"}
MANY_WORKERS = 64  # input workers beyond which a host's cores run out
_IDENTIFIER = re.compile(r"[\w.<>]+")  # a Python function's name as the tracer gives it (<listcomp>, Class.method)
OWN_SHARE = 0.5  # a function around the step's dispatches whose own time is this share of it is host work
URGENT_REASON = "a finding needs attention"
_ORDER = {Priority.P0: 0, Priority.P1: 1, Priority.P2: 2}


def size(nbytes: float) -> str:
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", 1024)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes:.0f} B"


def _rank(value: float, thresholds: Iterable[tuple[float, Priority]], *, below: bool = False) -> Priority | None:
    for threshold, priority in thresholds:
        if (value < threshold) if below else (value >= threshold):
            return priority
    return None


def _percent(text: Any) -> float | None:
    """``"4.35%"`` as 0.0435; None for anything else."""
    match = re.fullmatch(r"\s*(-?[\d.]+)\s*%\s*", str(text))
    return float(match.group(1)) / 100 if match else None


def _data(tools: dict[str, ToolResult], name: str) -> dict[str, Any]:
    result = tools.get(name)
    ok = result is not None and result.status is ToolStatus.OK and isinstance(result.data, dict)
    return result.data if ok else {}


# --- metrics -----------------------------------------------------------------------------------


def _metrics(hosts: list[HostEvidence], tools: dict[str, ToolResult]) -> Metrics:
    timed = [h for h in hosts if h.step_ms is not None and h.step_source is not StepSource.PROFILE_WINDOW]
    busy = [_computing(h) for h in hosts if h.busy_fraction is not None]
    metrics = Metrics(
        step_time_ms=sum(_steady_step_ms(h) for h in timed) / len(timed) if timed else None,
        steps=max((h.steps for h in timed), default=0),
        busy_fraction=_fraction(sum(busy) / len(busy)) if busy else None,
    )
    memory = _data(tools, "get_memory_profile")
    if memory.get("peak_memory_usage_gib", -1) > 0:
        metrics.peak_memory_bytes = int(memory["peak_memory_usage_gib"] * GIB)
        metrics.peak_memory_source = "memory_profile: peak memory in use on the device"
        if memory.get("memory_capacity_gib", -1) > 0:
            metrics.memory_capacity_bytes = int(memory["memory_capacity_gib"] * GIB)
    elif (found := _step_module(hosts, tools)) is not None:
        module, which = found
        metrics.peak_memory_bytes = int(module["total_hbm_mib"] * MIB)
        metrics.peak_memory_source = (
            f"memory_viewer: compile-time buffer assignment of {which}, {quoted(module['module_name'])}"
        )
    program = _data(tools, "get_roofline_model").get("program") or {}
    if program.get("bound_by") not in (None, "", "Unknown"):
        efficiency = _percent(program.get("roofline_efficiency_percent"))
        metrics.roofline_efficiency = None if efficiency is None else _fraction(efficiency)
    return metrics


def _steady_step_ms(host: HostEvidence) -> float:
    """The mean step after the warm-up (the steps that hold programs' first compilations), else of every step."""
    steady = host.warmup.steady_step_ms if host.warmup else None
    return steady.mean if steady else host.step_ms.mean


def _step_module(hosts: list[HostEvidence], tools: dict[str, ToolResult]) -> tuple[dict[str, Any], str] | None:
    """The compiled program whose buffers are the loop's: the one launched most, not a one-off like ``jit__normal``.

    Without launches to tell (or with every program launched once), the largest program stands in.
    """
    modules = (_data(tools, "get_peak_allocations").get("summary") or {}).get("top_modules") or []
    if not modules:
        return None
    calls: dict[str, int] = {}
    every_step: set[str] = set()  # programs launched at least once per step (the last step may be cut short)
    for host in hosts:
        launched = ([(p.name, p.calls) for p in host.programs]
                    or [(a.name, round(a.count_per_step * host.steps)) for a in host.dispatched])
        for name, count in launched:
            calls[_module_base(name)] = calls.get(_module_base(name), 0) + count
            if count > 1 and count >= host.steps - 1:
                every_step.add(_module_base(name))
    repeated = [m for m in modules if calls.get(_module_base(str(m.get("module_name", ""))), 0) > 1]
    if not repeated:
        return modules[0], "the largest program"
    most = max(repeated, key=lambda m: (calls[_module_base(m["module_name"])], m["total_hbm_mib"]))
    # An iteration of several programs (micro-batches, then their apply) peaks with its largest.
    largest = max((m for m in repeated if _module_base(m["module_name"]) in every_step),
                  key=lambda m: m["total_hbm_mib"], default=most)
    if largest["total_hbm_mib"] > most["total_hbm_mib"]:
        return largest, "the largest program the loop runs every step"
    return most, "the program launched most"


def _fraction(value: float) -> float:
    return min(1.0, max(0.0, value))


def _share_of_step(host: HostEvidence, ms: float) -> float:
    return _fraction(ms / host.step_ms.mean) if host.step_ms and host.step_ms.mean > 0 else 0.0


def _attributed(host: HostEvidence, *causes: TimeCause) -> float | None:
    """The share of the loop's wall time the attribution gives these causes; None without an attribution."""
    if host.attribution is None or host.attribution.loop_ms <= 0:
        return None
    return _fraction(sum(part.share for part in host.attribution.parts if part.cause in causes))


def _computing(host: HostEvidence) -> float:
    """The share of the loop the devices compute (collectives included; a device waiting for a copy between host
    and device memory, such as a TPU copy-done, is busy but not computing)."""
    attributed = _attributed(host, TimeCause.DEVICE_COMPUTE, TimeCause.COLLECTIVES)
    return host.loop_busy() * (1 - _transfer_share(host)) if attributed is None else attributed


def _health(hosts: list[HostEvidence], metrics: Metrics) -> Health:
    def share(host: HostEvidence, cause: TimeCause, ms_per_step: float) -> float:
        attributed = _attributed(host, cause)
        return _share_of_step(host, ms_per_step) if attributed is None else attributed

    health = Health(
        compute_fraction=metrics.busy_fraction,
        idle_fraction=None if metrics.busy_fraction is None else 1 - metrics.busy_fraction,
        communication_fraction=max((share(h, TimeCause.COLLECTIVES, h.communication_ms_per_step) for h in hosts),
                                   default=0.0),
        memory_fraction=(_fraction(metrics.peak_memory_bytes / metrics.memory_capacity_bytes)
                         if metrics.peak_memory_bytes and metrics.memory_capacity_bytes else None),
        dispatches_per_step=max((h.dispatches_per_step for h in hosts), default=0.0),
        compile_fraction=max((max(share(h, TimeCause.COMPILATION, h.recompile_ms_per_step),
                                  h.recompile_cost.share_of_loop if h.recompile_cost else 0.0) for h in hosts),
                             default=0.0),
    )
    reasons = []
    if health.compute_fraction is None or health.compute_fraction < HIGH_COMPUTE:
        reasons.append(f"compute is busy less than {HIGH_COMPUTE:.0%} of the step")
    if (health.communication_fraction or 0) > LOW_COMMUNICATION:
        reasons.append(f"communication takes more than {LOW_COMMUNICATION:.0%} of the step")
    if health.compile_fraction > LOW_COMPILE:
        reasons.append(f"compilation takes more than {LOW_COMPILE:.0%} of the step")
    if health.memory_fraction is not None and health.memory_fraction > SAFE_MEMORY:
        reasons.append(f"peak memory is above {SAFE_MEMORY:.0%} of capacity")
    health.optimal = not reasons
    health.reasons = reasons
    return health


# --- findings ----------------------------------------------------------------------------------


def _is_host_work(activity: HostActivity) -> bool:
    """Host activity that is the host's own work: not dispatching, compiling or waiting on the device; a function
    around the step's dispatches is host work when most of its time is its own, not its dispatches'."""
    name = activity.name
    if name.startswith(DISPATCH_PREFIX) or COMPILE.match(name) or WAITING.search(name):
        return False
    if activity.self_ms_per_step is not None:
        return activity.self_ms_per_step >= OWN_SHARE * activity.ms_per_step
    return not activity.encloses_dispatches


def _host_ms(activity: HostActivity) -> float:
    """What a host activity costs per step: its own time where the evidence has it."""
    return activity.self_ms_per_step if activity.self_ms_per_step is not None else activity.ms_per_step


_LANES = {"cpu": "the XLA CPU threads", "gpu": "the GPU streams", "tpu": "the TPU XLA ops"}


def _input_bound(host: HostEvidence) -> list[tuple[host_causes.Cause, Finding]]:
    """The devices waiting on the host: a finding per named cause, with its cause, the costliest first with the
    loop's context."""
    if host.busy_fraction is None or not host.step_ms:
        return []
    step = host.step_ms.mean
    gap = host.gap_ms_per_step or 0.0
    iteration = step + gap
    idle = 1 - host.loop_busy()
    idle_ms = idle * iteration
    host_work = [a for a in host.host_activities if _is_host_work(a) and a.share_of_step >= NOTABLE_SHARE]
    between = [a for a in host.between_steps if _is_host_work(a) and a.share_of_step >= NOTABLE_SHARE]
    # A loop of one program per step whose devices idle while the host neither dispatches, compiles nor waits
    # on them is waiting on the host's own work, named or not. Without steps, or in op-by-op and compiling
    # loops (findings of their own), only the host's named work and the gaps between steps count.
    quiet = not _launches_op_by_op(host) and host.compile_ms_per_step < LOW_COMPILE * step
    # Where the launches bound the loop, the untraced time and the syncs around them are theirs (a finding of
    # its own).
    launch = launches.launch_bound(host, OFTEN_DISPATCHED) if quiet else None
    around_ms = ((launch.untraced_ms_per_launch + launch.sync_ms_per_launch) * launch.launches_per_step
                 if launch else 0.0)
    if quiet and host.step_source in (StepSource.STEP_MARKERS, StepSource.PROGRAM_RUNS):
        explained_ms = idle_ms - host.waiting_idle_ms_per_step - host.dispatch_ms_per_step - around_ms
    else:
        explained_ms = min(idle_ms, sum(_host_ms(a) for a in host_work) + gap)
    loop = "iteration" if gap >= NOTABLE_SHARE * step else "step"
    named = [cause for cause in host_causes.causes(host, NOTABLE_SHARE * iteration)
             if launch is None or not cause.parts or not {part.name for part in cause.parts} <= set(launch.syncs)]
    # Idle time the host shows but no named cause holds (untraced, or work of no known kind) leads when it is the
    # largest part.
    unnamed_ms = explained_ms - sum(cause.ms for cause in named)
    # In a loop that neither launches op by op nor compiles, the training thread's untraced time is its own code
    # or a wait the trace does not show, and is named as such where the attribution finds it the largest waste.
    untraced = host_causes.untraced(host, UNTRACED_SHARE) if quiet and launch is None else None
    if untraced is not None:
        named = sorted([untraced, *named], key=lambda cause: -cause.ms)
    elif not named or unnamed_ms > max(named[0].ms, NOTABLE_SHARE * iteration):
        named.insert(0, host_causes.Cause(HostCause.HOST_WORK, explained_ms if not named else unnamed_ms))
    lanes = _LANES[host.device_kind.value]
    context = [
        f"busy fraction {host.loop_busy():.3f} of {lanes} over the loop (steps and the "
        f"gaps between them): compute is idle {1 - _computing(host):.1%} of each {loop} (mean of {host.steps} steps, "
        f"{host.step_source.value})",
        f"step time {step:.2f} ms (median {host.step_ms.median:.2f}, p90 {host.step_ms.p90:.2f})",
    ]
    if loop == "iteration":
        context.append(f"host time between steps: {gap:.2f} ms per gap")
    context += [f"the step runs inside {quoted(a.name)} ({a.ms_per_step:.2f} ms per step), around its jit "
                "dispatches: not counted as host work" for a in host.host_activities
                if a.encloses_dispatches and not _is_host_work(a) and a.share_of_step >= NOTABLE_SHARE][:1]
    findings = []
    for rank, cause in enumerate(named):
        share = _fraction(cause.share if cause.share is not None else cause.ms / iteration)
        # The costliest cause carries the whole wait for the host that the loop shows, named or not.
        priority = _rank(max(share, _fraction(explained_ms / iteration)) if rank == 0 else share, IDLE_PRIORITIES)
        if rank == 0 and quiet and cause.kind in NAMED_CAUSES and share >= NAMED_CAUSE_P0:
            priority = Priority.P0
        if priority is None:
            continue
        evidence = (context if rank == 0 else []) + _cause_evidence(host, cause, host_work, between)
        if rank == 0 and cause.kind is not HostCause.TRANSFERS and host.untraced_host_ms_per_step >= (
                NOTABLE_SHARE * iteration):
            evidence.append(f"untraced host time while the devices idle: {host.untraced_host_ms_per_step:.2f} ms per "
                            "step (Python code, sleeps or I/O that the trace does not record; capture with the "
                            "Python tracer to name it)")
        findings.append((cause, _host_cause_finding(host, cause, priority, evidence, share, iteration, loop,
                                                    lanes)))
    return findings


def _cause_evidence(host: HostEvidence, cause: host_causes.Cause, host_work: list[HostActivity],
                    between: list[HostActivity]) -> list[str]:
    """The named work behind a cause, quoted, with the times the evidence holds."""
    per = "per step" if cause.steps_per_part == 1 else f"over the {cause.steps_per_part} steps of the loop"
    if cause.kind is HostCause.HOST_WORK and not cause.parts:
        return ([f"host work between steps: {quoted(a.name)} {_host_ms(a):.2f} ms per gap" for a in between[:3]]
                + [f"host work inside steps: {quoted(a.name)} {_host_ms(a):.2f} ms per step of its own"
                   for a in host_work[:3]])
    if cause.kind is HostCause.UNTRACED and host.attribution is not None:
        return [f"the training thread {quoted(part.thread)} has no event for {part.ms_per_step:.1f} ms of the "
                f"loop's {host.attribution.loop_ms:.1f} ms ({part.share_of_step:.1%}) while the devices idle: no "
                "Python tracer frame, TraceMe scope or runtime call covers that time" for part in cause.parts[:1]]
    if cause.kind is HostCause.INTERPRETER_LOCK:
        return [f"while the devices idle and the training thread needs the interpreter (in its own Python code, a "
                f"jit dispatch, or no event: back from a call that let go of it), the host thread "
                f"{quoted(part.thread)} runs Python code of its own in {quoted(part.name)}: {part.ms_per_step:.2f} ms "
                f"{per}" for part in cause.parts[:3]]
    stepping = host_causes.stepping_threads(host)
    elsewhere = [part for part in cause.parts if part.thread and part.thread not in stepping]
    lines = []
    if elsewhere:
        lines += ([f"the training thread waits on other host threads (a queue's get or put, a lock) "
                   f"{host.thread_wait_ms_per_step:.2f} ms per step while the devices idle"]
                  if cause.steps_per_part == 1 else [])
        lines += [f"meanwhile the host thread {quoted(part.thread)} runs {quoted(part.name)}: "
                  f"{part.ms_per_step:.2f} ms {per}" for part in elsewhere[:4]]
        lines += [f"and for {part.ms_per_step:.2f} ms {per} more, its Python ({quoted(part.name)} on "
                  f"{quoted(part.thread)}) holds the interpreter the training thread needs to go on"
                  for part in cause.interpreter[:2]]
    if cause.kind in (HostCause.PRODUCER_THREAD, HostCause.CONSUMER_THREAD):
        return lines
    if cause.kind is HostCause.TRANSFERS:
        return _copies_evidence(host, cause, per, stepping)
    syncs = [part for part in cause.parts if part.reads_device and part.count_per_step > 0]
    lines += [f"{quoted(part.name)} reads device values back {part.count_per_step:.1f} times per step, waiting "
              f"{part.ms_per_step:.2f} ms per step for the devices' work: the training thread's other work cannot "
              "overlap it" for part in syncs[:1]]
    for part in [part for part in cause.parts if part not in elsewhere and part not in syncs][:3]:
        lines.append(f"{quoted(part.name)} on the training thread: {part.ms_per_step:.2f} ms {per} of its own "
                     "(outside jit dispatches, compilation, copies and waits, while the devices idle)")
        lines += [f"it runs inside {quoted(a.name)} ({a.ms_per_step:.2f} ms per step with the step's jit dispatches)"
                  for a in host.host_activities if a.encloses_dispatches and a.name != part.name
                  and any(owner.name == part.name for owner in a.owners)][:1]
    lines += [f"with its copies between host and device memory on the training thread: {quoted(part.name)}, "
              f"{part.ms_per_step:.2f} ms {per}" for part in cause.copies[:2]]
    named = {part.name for part in cause.parts}
    if cause.kind is HostCause.DEVICE_SYNC and any(o.reads_device and o.name in named
                                                   for a in (*host.host_activities, *host.between_steps)
                                                   for o in a.owners):
        lines.append("it reads device values back every step (float(), .item(), np.asarray or block_until_ready), "
                     "which waits for the step to finish")
    return lines


def _copies_evidence(host: HostEvidence, cause: host_causes.Cause, per: str, stepping: set[str]) -> list[str]:
    """A copies cause's evidence: each thread's copies, the training thread's calls by direction, and whether the
    copies' time goes beyond the calls (the waits for copies to the device in flight, the runtime's relayout)."""
    looping = read_loops.read_after_each_launch(host)
    lines = [f"copies between host and device memory on "
             f"{'the training thread' if part.thread in stepping else f'the host thread {quoted(part.thread)}'}: "
             f"{quoted(part.name)}, {part.ms_per_step:.2f} ms {per} while the devices idle"
             for part in cause.parts[:3]]
    lines += [f"each launch of {quoted(looping.name)} follows the read of the last one's result: its dispatch goes "
              "with the reads" for part in cause.parts[:3]
              if looping is not None and looping.name in part.name.split(" + ")][:1]
    lines += [f"{(transfer_direction(t.name) or 'host-device').replace(' ', '-')} copy {quoted(t.name)} on the "
              f"training thread: {t.count_per_step:.1f} calls per step, {t.ms_per_step:.2f} ms per step in the call"
              for t in host.transfers[:3]]
    lines += [f"the jit call {quoted(call.name)} reads device values back inside the call: {call.count_per_step:.1f} "
              f"calls per step, {call.ms_per_step:.2f} ms per step" for call in host_causes.checked_calls(host)[:2]]
    in_calls = sum(t.ms_per_step for t in host.transfers)
    copying = sum(part.ms_per_step for part in cause.parts if part.thread in stepping) / cause.steps_per_part
    if any(transfer_direction(t.name) == "host to device" for t in host.transfers) and (
            copying - in_calls >= IN_FLIGHT_SHARE * copying):
        lines.append("each copy to the device returns before the data lands: the training thread's wait while it "
                     "is in flight (with no event, in block_until_ready, or in the code that made the call), up to "
                     "when it is done (the step starts, or the runtime's threads finish it), is counted with the copy")
    if cause.steps_per_part == 1 and host.transfer_ms_per_step > sum(p.ms_per_step for p in cause.parts):
        lines.append(f"copies between host and device on any host thread, the runtime's own work on them "
                     f"included: {host.transfer_ms_per_step:.2f} ms per step while the devices idle")
    return lines


def _host_cause_finding(host: HostEvidence, cause: host_causes.Cause, priority: Priority, evidence: list[str],
                        share: float, iteration: float, loop: str, lanes: str) -> Finding:
    words, what = host_causes.WORDS[cause.kind]
    stepping = host_causes.stepping_threads(host)
    named = _functions_in_prose([part for part in cause.parts if not part.thread or part.thread in stepping]) if (
        cause.kind is HostCause.HOST_WORK) else ""
    title = (f"Host-bound: compute idle {share:.0%} of each {loop} in {named} on the training thread" if named else
             f"Host-bound: compute idle {share:.0%} of each {loop} waiting for the host"
             if cause.kind is HostCause.HOST_WORK else
             f"Host-bound: the training thread's own Python code or waits, untraced: {share:.0%} of the loop"
             if cause.kind is HostCause.UNTRACED else
             f"Host-bound: compute idle {share:.0%} of each {loop} while the host reads device values back "
             f"{reads.count_per_step:.0f} times a step, one by one"
             if cause.kind is HostCause.TRANSFERS and (reads := _reads_a_step(host)) else
             f"Host-bound: compute idle {share:.0%} of each {loop} while {words}")
    remaining = iteration - cause.ms
    faster = (f" ({iteration / remaining:.1f}x faster)" if remaining >= NOTABLE_SHARE * iteration else "")
    growth = _growing_steps(host) if cause.kind in GROWING_WORK else None
    fix = _host_cause_fix(host, cause)
    if growth is not None:
        first, last, per_step = growth
        evidence = [*evidence, f"the steps grow longer every step: {first:.1f} ms in the first, {last:.1f} ms in the "
                               f"last of {len(host.series.step_ms)}"]
        names = _functions_in_prose(cause.parts)
        fix = (f"The work grows with the run: each step takes about {per_step:.1f} ms longer than the last, so the "
               f"work of {names or 'the host'} scales with how far the run has gone (a buffer concatenated anew "
               "each step, a list scanned or copied whole, a cache that is never emptied). Give it a fixed cost per "
               "step: a buffer preallocated at its final size (or a ring buffer) written in place, a running value. "
               + fix)
    impact = (f"{cause.ms:.1f} ms of each {iteration:.1f} ms {loop} is idle for this cause ({share:.0%} of the "
              f"loop); without it the {loop} could approach {max(remaining, 0.0):.1f} ms{faster}.")
    if cause.kind is HostCause.TRANSFERS and (reads := _reads_a_step(host)) and (
            computing := [call for call in host.dispatched if abs(call.count_per_step - reads.count_per_step) < 0.5]):
        launches_ms = sum(call.ms_per_step for call in computing)
        evidence = [*evidence, *(f"launched as often as the reads, to compute what they read: {quoted(call.name)}, "
                                 f"{call.count_per_step:.0f} calls per step, {call.ms_per_step:.2f} ms per step"
                                 for call in computing[:3])]
        impact += (f" With the {sum(call.count_per_step for call in computing):.0f} launches a step that compute "
                   f"what is read ({launches_ms:.1f} ms), {min(1.0, (cause.ms + launches_ms) / iteration):.0%} of "
                   "the loop.")
    return Finding(
        priority=priority,
        category=FindingCategory.DATA_MOVEMENT if cause.kind is HostCause.TRANSFERS else FindingCategory.INPUT_BOUND,
        title=title,
        what=f"{lanes[0].upper()}{lanes[1:]} wait for the host. {what}",
        evidence=evidence,
        impact=impact,
        fix=fix,
    )


def _growing_steps(host: HostEvidence) -> tuple[float, float, float] | None:
    """The first and last step times and the growth per step, where the steps grow longer step after step (in
    ``STEADY_GROWTH`` of them) to at least twice the first."""
    times = host.series.step_ms
    rising = sum(later > earlier for earlier, later in zip(times, times[1:]))
    if not _steady_growth(times, rising, host.series.truncated):
        return None
    return times[0], times[-1], (times[-1] - times[0]) / (len(times) - 1)


def _steady_growth(values: list[float] | list[int], rises: int, truncated: bool) -> bool:
    """Whether a per-step series grows with the run: ``GROWING_STEPS`` steps or more, all of them in the series,
    ``rises`` of the steps after the first rising (``STEADY_GROWTH`` of them or more), the last twice the first."""
    return (len(values) >= GROWING_STEPS and not truncated and rises >= STEADY_GROWTH * (len(values) - 1)
            and values[-1] >= 2 * values[0] and values[-1] > 0)


def _host_cause_fix(host: HostEvidence, cause: host_causes.Cause) -> str:
    framework = frameworks.detect([host])
    many = [copy for copy in host.transfers if copy.count_per_step >= read_loops.MANY_COPIES]
    reading = many[0] if many and transfer_direction(many[0].name) == "device to host" else None
    decided = read_loops.read_after_each_launch(host)
    if cause.kind is HostCause.TRANSFERS and decided is not None and framework in (Framework.JAX, Framework.UNKNOWN):
        return (f"Each of the {decided.count_per_step:.0f} launches a step of {quoted(decided.name)} is read back "
                "before the next: a Python loop that decides on the device's result at every iteration (while "
                "float(change) > tol, a convergence or stopping test), one launch and one wait each. Run the loop "
                "on the device: jax.lax.while_loop with the test in its condition (or lax.fori_loop with a fixed "
                "count), inside one jitted call; where Python must decide, test every N iterations, or run N "
                "iterations per call.")
    if cause.kind is HostCause.TRANSFERS and reading is not None and framework in (Framework.JAX, Framework.UNKNOWN):
        return (f"Read back in one call what is now read in {many[0].count_per_step:.0f} calls a step: an element "
                "read on its own (float(x[i]), .item(), iterating over a device array) slices it on the device and "
                "copies it back, one launch and one wait per element. Take the whole array once (np.asarray(x) or "
                "jax.device_get of the pytree) and index the numpy result; better still, reduce on the device "
                "(jnp.sum, jnp.mean inside the jitted step) and read back the one number, every N steps.")
    if cause.kind is HostCause.TRANSFERS and (reads := _reads_a_step(host)) and framework in (
            Framework.JAX, Framework.UNKNOWN):
        return (f"Read back in one call what is now read in {reads.count_per_step:.0f} calls a step: each read of "
                "a device value (float(x), .item(), np.asarray) waits for the work that makes it and copies it back "
                "on its own, and what is computed eagerly for it (a norm, a mean, a cast outside the jit) adds "
                "launches of its own. Compute the values inside the jitted step, return them with its result (one "
                "array or one pytree), and read them together with one jax.device_get, every N steps where the log "
                "does not need each one.")
    if cause.kind is HostCause.TRANSFERS and many and framework in (Framework.JAX, Framework.UNKNOWN) and (
            _launches_op_by_op(host)):
        return (f"The step runs op by op, and most of its {many[0].count_per_step:.0f} copies a step are the eager "
                "calls' own arguments: eager indexing (x[k]) and Python scalars are put on the device at every "
                "call. One jitted step (lax.scan over the micro-batches or items, indexing inside it), or slices "
                "made once before the loop, removes them with the launches; copies of arrays of your own go in one "
                "call (np.stack, or one jax.device_put of the whole pytree).")
    if cause.kind is HostCause.TRANSFERS and many and framework in (Framework.JAX, Framework.UNKNOWN):
        return (f"Copy in one call what is now copied in {many[0].count_per_step:.0f} calls a step: stack the arrays "
                "into one (np.stack) or hand the whole pytree to a single jax.device_put, so that the per-call cost "
                "is paid once; better still, keep what does not change on the device, and copy the next batch "
                "while the current step runs.")
    if cause.kind is HostCause.TRANSFERS and host_causes.checked_calls(host) and framework in (
            Framework.JAX, Framework.UNKNOWN):
        return ("The jit call copies its own outputs to the host inside the call, every call: that is what "
                "jax_debug_nans (or jax_debug_infs) does, checking each output for NaNs. Turn it off for training "
                "(jax.config.update('jax_debug_nans', False), and unset JAX_DEBUG_NANS); to catch NaNs, check the "
                "loss every N steps, or use jax.experimental.checkify inside the step.")
    if cause.kind is HostCause.PRODUCER_THREAD:
        return frameworks.producer_fix(framework, [p.name for p in cause.parts])
    if cause.kind is HostCause.CHECKPOINT and host_causes.on_other_threads(host, cause):
        return ("The save already runs on another thread, yet the training thread waits for it: wait for a save "
                "only before the next one starts (or at exit), not right after starting it. "
                + (frameworks.cause_fix(cause.kind, framework) or ""))
    if cause.kind is HostCause.HOST_WORK and cause.parts and (fix := host_causes.known_call_fix(cause.parts[0].name)):
        return fix
    blocked = host_causes.blocked_on(host, cause) if cause.kind in (HostCause.HOST_WORK, HostCause.BATCH_MAKING) else ""
    if blocked == "disk" or (blocked and cause.kind is HostCause.HOST_WORK):
        who = _functions_in_prose(cause.parts) or "The training thread"
        fix = host_causes.BLOCKED_FIXES[blocked].format(who=who)
        if blocked == "disk" and (ratio := host_causes.outpaces_device(host, cause)):
            return _cheaper_first(host, cause, ratio) + " " + fix
        return fix
    fix = _overlap_fix(host, cause, framework)
    if ratio := host_causes.outpaces_device(host, cause):
        fix = _cheaper_first(host, cause, ratio) + " " + fix
    if first := _made_on_the_device_first(host, cause):
        return first + fix[:1].lower() + fix[1:]
    return fix


def _made_on_the_device_first(host: HostEvidence, cause: host_causes.Cause) -> str:
    """For named host work of no known kind, or the training thread's untraced time, in a loop that copies arrays
    to the device every step: the check that comes before any overlap, whether the device could make what the host
    makes."""
    names = _functions_in_prose(cause.parts) if cause.kind is HostCause.HOST_WORK else ""
    what = (f"what {names} makes" if names else "what the training thread copies to the device every step"
            if cause.kind is HostCause.UNTRACED else "")
    if not what or not any(transfer_direction(copy.name) == "host to device"
                           and copy.count_per_step >= host_causes.EVERY_STEP for copy in host.transfers):
        return ""
    return (f"First, if {what} depends only on shapes or the step number (an attention mask or bias, position "
            "ids, a schedule, a constant), make it inside the jitted step (jnp.tril, jnp.arange: fused into its "
            "consumers, never copied) or once before the loop, kept on the device. Otherwise, ")


def _reads_a_step(host: HostEvidence) -> HostActivity | None:
    """The training thread's reads of device values when it makes several a step, fewer than an element-by-element
    read's: values read one by one (a norm per gradient leaf, a metric per name), each waiting for its own work;
    None where the reads are a jit call's own (a NaN check of its outputs)."""
    if host_causes.checked_calls(host):
        return None
    return next((copy for copy in host.transfers if transfer_direction(copy.name) == "device to host"
                 and read_loops.LOOPED_READS <= copy.count_per_step < read_loops.MANY_COPIES), None)


def _functions_in_prose(parts: list[HostActivity]) -> str:
    """The first functions of a cause's parts, quoted, for a title's or a fix's words: only names a function can
    have, so that no profile text that reads as a sentence leaves the evidence."""
    names = [host_causes.function_name(part.name) for part in parts[:2]]
    return " and ".join(quoted(name) for name in names if _IDENTIFIER.fullmatch(name))


def _cheaper_first(host: HostEvidence, cause: host_causes.Cause, ratio: float) -> str:
    """Host work many times the devices' step: overlapping it with the step hides only the devices' time."""
    names = _functions_in_prose(cause.parts) or "the host work named above"
    device_ms = host_causes.device_ms_per_step(host)
    workers = (f"{math.ceil(round(ratio, 1))} workers share it" if ratio <= MANY_WORKERS
               else "it is split over more workers than a host has cores")
    return (f"Make {names} cheaper first: it takes {cause.ms:.1f} ms a step, {ratio:.0f}x the devices' "
            f"{device_ms:.1f} ms of work, so running it ahead of the step hides at most those {device_ms:.1f} ms "
            f"and the loop stays host-bound unless {workers}. Look in it for "
            "work done every step that is needed once, or on far less data than it touches: a shuffle, copy or "
            "conversion of the whole dataset to take one batch (shuffle the indices once per epoch and gather only "
            "the batch's rows), a file read or parsed again, a table rebuilt; and for Python loops over rows or "
            "elements that one vectorised numpy call would do. Then:")


def _overlap_fix(host: HostEvidence, cause: host_causes.Cause, framework: Framework) -> str:
    """How to run the host work of ``cause`` beside the devices' work instead of between their steps."""
    if cause.kind is HostCause.HOST_RANDOM and host.device_kind is DeviceKind.CPU:
        return ("On a CPU the jit draws random numbers on the same cores, at about numpy's cost: draw the next "
                "step's numbers ahead instead, beside the current step. "
                + frameworks.host_work_fix(framework, input_pipeline=False))
    if fix := frameworks.cause_fix(cause.kind, framework):
        return fix
    # Threads seen working while the training thread waits are a pipeline already, and untraced waiting may be
    # one the trace cannot show: advise adding a thread only where the host's own named work is the wait.
    untraced = host.untraced_host_ms_per_step >= OWN_SHARE * cause.ms
    fix = frameworks.host_work_fix(framework, frameworks.has_input_pipeline([host]) or bool(host.while_waiting)
                                   or untraced)
    if untraced:
        fix = ("Name the host work first: most of it is untraced, so capture again with the Python tracer on "
               "(ProfileOptions python_tracer_level=1), which records each Python function and the other threads "
               f"(a loader's reads and decoding). {fix}")
    return fix


def _dispatch_share(host: HostEvidence) -> float:
    """The share of the step the host spends dispatching programs, as measured."""
    return host.dispatch_ms_per_step / host.step_ms.mean if host.step_ms and host.step_ms.mean > 0 else 0.0


def _launches_op_by_op(host: HostEvidence) -> bool:
    """Many dispatches per step, or several whose measured dispatch time holds much of it, of programs that run
    shorter on the devices than the host takes to launch them: longer ones queue ahead and cost nothing. Where
    each program's device work is known apart, many dispatches per step of which most launch such small programs
    are op by op too, whatever the few large ones compute: often enough, or for enough of the step."""
    computing_ms = (host.busy_fraction or 0.0) * host.step_ms.mean if host.step_ms else 0.0
    small, small_ms = _small_launches_per_step(host)
    step_ms = host.step_ms.mean if host.step_ms else 0.0
    return host.dispatches_per_step >= OFTEN_DISPATCHED and (
        computing_ms < host.dispatch_ms_per_step and (
            host.dispatches_per_step >= OP_BY_OP_DISPATCHES or _dispatch_share(host) >= IDLE_PRIORITIES[1][0])
        or small >= OFTEN_DISPATCHED and (
            small >= OP_BY_OP_DISPATCHES or step_ms > 0 and small_ms / step_ms >= IDLE_PRIORITIES[1][0]))


def _small_launches_per_step(host: HostEvidence) -> tuple[float, float]:
    """Jit dispatches per step of programs whose device work per call is shorter than their launch, and the
    host's time launching them per step."""
    small = [p for p in host.programs if p.name.startswith(DISPATCH_PREFIX) and p.device_ms_per_call < p.ms_per_call]
    if not host.steps:
        return 0.0, 0.0
    return sum(p.calls for p in small) / host.steps, sum(p.calls * p.ms_per_call for p in small) / host.steps


def _dispatch_overhead(host: HostEvidence, kernels: list[KernelShare]) -> Finding | None:
    """Op-by-op execution (:func:`_launches_op_by_op`), or one small function called over and over."""
    if not host.step_ms or not _launches_op_by_op(host):
        return None
    span = host.step_ms.mean
    idle = 1 - (host.busy_fraction or 0.0)
    # Compiling inside the launches is a finding of its own: the launches rank by the idle time left beside it.
    launching = idle - (_attributed(host, TimeCause.COMPILATION) or 0.0)
    priority = (Priority.P0 if launching >= IDLE_PRIORITIES[0][0] else
                Priority.P1 if launching >= IDLE_PRIORITIES[-1][0] else Priority.P2)
    framework = frameworks.detect([host])
    device = _LANES[host.device_kind.value]
    origins = [origin for origin in host.dispatch_origins[:MAX_DISPATCH_ORIGINS]
               if origin.count_per_step >= DISPATCH_ORIGIN_FLOOR * host.dispatches_per_step]
    repeated = bool(host.dispatched) and host.dispatched[0].count_per_step >= (
        ONE_FUNCTION_SHARE * host.dispatches_per_step)
    kind = "Many calls of one small jitted function" if repeated else "Op-by-op execution"
    growth = _growing_dispatches(host)
    if host.step_source is StepSource.PROFILE_WINDOW:
        per = "capture"
        count = f"{host.launches} jit dispatches in the capture, no steps"
        title = f"{kind}: {host.launches} small launches with the devices idle {idle:.0%} between them"
    else:
        per = "step"
        count = f"{host.dispatches_per_step:.0f} jit dispatches (PjitFunction) per step over {host.steps} steps"
        title = f"{kind}: {host.dispatches_per_step:.0f} jit dispatches per step"
        if growth is not None:
            title = f"{kind}: jit dispatches per step growing every step, from {growth.first} to {growth.last}"
    what = ("One small compiled function is called many times per step (once per example or item, from a Python "
            "loop): each call is a launch of its own, with the host's per-call overhead, so that overhead, not "
            f"compute, sets the pace and {device} idle between calls." if repeated else
            "The work is not one compiled program: every small operation is dispatched from Python as its own "
            f"XLA executable, so the host's per-op overhead, not compute, sets the pace and {device} idle "
            "between launches.")
    fix = (frameworks.batched_calls_fix(framework) if repeated else
           frameworks.one_program_fix(framework, on_gpu=host.device_kind is DeviceKind.GPU,
                                      named_function=bool(origins)))
    if growth is not None:
        what += " " + _GROWING_LIST_WHAT
        fix = _GROWING_LIST_FIX
    return Finding(
        priority=priority,
        category=FindingCategory.DISPATCH_OVERHEAD,
        title=title,
        what=what,
        evidence=[
            count,
            *([growth.line(host)] if growth is not None else []),
            *(f"the dispatches come from {quoted(origin.name)} ({origin.count_per_step:.0f} per {per}, "
              f"{origin.ms_per_step:.2f} ms per {per})" for origin in origins),
            f"compute busy {host.busy_fraction or 0.0:.1%} of the {span:.2f} ms {per}",
            *(f"{quoted(a.name)}: {a.count_per_step:.0f} per {per}, {a.ms_per_step:.2f} ms per {per}"
              for a in host.dispatched[:4]),
            *_device_time(host, kernels),
        ],
        impact=f"{host.dispatch_ms_per_step:.1f} ms per {per} is spent dispatching and {idle * span:.1f} ms of the "
               f"{span:.1f} ms {per} leaves compute idle; one fused program usually removes most of it.",
        fix=fix,
    )


_GROWING_LIST_WHAT = ("Each step launches more small programs than the last: a Python loop over a collection of "
                      "device values that grows every step (sum(losses), a mean or max over the whole history) "
                      "reduces it one launch per element, so this cost grows with the run.")
_GROWING_LIST_FIX = (
    "Keep a running value on the device instead of reducing the whole history every step: total = total + loss "
    "(mean = total / count), best = jnp.minimum(best, loss); Python's sum(list) adds one device array at a time, one "
    "launch each. Where the history itself is wanted, write each value into a preallocated device array at its step "
    "and reduce it in one jitted call, or read the values back once and reduce them with numpy.")


def _growing_launches(host: HostEvidence) -> Finding | None:
    """Launches per step that grow every step in a loop that is not op by op (a CPU, whose eager ops run as device
    work, or a busy device): a cost that grows with the run, ranked a level above what it costs now."""
    growth = _growing_dispatches(host)
    if growth is None or not host.step_ms or not host.dispatched or _launches_op_by_op(host):
        return None
    step = host.step_ms.mean
    growing = host.dispatched[0]
    share = growing.ms_per_step / step if step > 0 else 0.0
    priority = _rank(share, IDLE_PRIORITIES)
    if priority is None:
        return None
    return Finding(
        priority=Priority.P0 if priority is Priority.P0 else Priority.P1,
        category=FindingCategory.DISPATCH_OVERHEAD,
        title=f"Launches that grow every step: {growth.first} jit dispatches in the first step, {growth.last} in the "
              f"last, {share:.0%} of the step",
        what=_GROWING_LIST_WHAT,
        evidence=[growth.line(host),
                  f"{quoted(growing.name)}: {growing.count_per_step:.1f} per step, {growing.ms_per_step:.2f} ms per "
                  f"step of a {step:.2f} ms step"],
        impact=f"{growing.ms_per_step:.2f} ms of each {step:.2f} ms step ({share:.0%}) now, and more every step.",
        fix=_GROWING_LIST_FIX,
    )


class _DispatchGrowth(NamedTuple):
    first: int
    last: int
    by: int

    def line(self, host: HostEvidence) -> str:
        return (f"the dispatches grow by {self.by} every step: {self.first} in the first step, {self.last} in step "
                f"{len(host.series.dispatches)}")


def _growing_dispatches(host: HostEvidence) -> _DispatchGrowth | None:
    """Dispatches per step that grow by the same count from step to step (in ``STEADY_GROWTH`` of the steps) to at
    least twice the first step's: a Python loop over a list that grows every step, launching one op per element."""
    counts = host.series.dispatches
    by, rises = Counter(b - a for a, b in zip(counts, counts[1:])).most_common(1)[0] if len(counts) > 1 else (0, 0)
    if by < 1 or not _steady_growth(counts, rises, host.series.truncated):
        return None
    return _DispatchGrowth(counts[0], counts[-1], by)


def _launch_bound(host: HostEvidence, programs: dict[str, HloProgram]) -> Finding | None:
    """A few launches per step of a program so small that launching it costs more than running it."""
    launch = launches.launch_bound(host, OFTEN_DISPATCHED)
    priority = _rank(launch.share, IDLE_PRIORITIES) if launch is not None and host.step_ms else None
    if priority is None or launch is None:
        return None
    if launch.device_ms_per_launch >= launches.SMALL_PROGRAM_MS:
        # A program of milliseconds pays the round trip once per step: what not waiting for it saves is unmeasured.
        priority = Priority.P2
    step = host.step_ms.mean
    iteration = step + (host.gap_ms_per_step or 0.0)
    per_step = launch.launches_per_step
    ratio = launch.host_ms_per_launch / launch.device_ms_per_launch if launch.device_ms_per_launch > 0 else None
    longer = (f"{ratio:.0f}x its device time" if ratio is not None and ratio <= MAX_TITLE_RATIO
              else "far longer than it runs on the device")
    shares = {cause: sum(p.share for p in host.attribution.parts if p.cause is cause)
              for cause in (TimeCause.DISPATCH, TimeCause.UNTRACED)}
    syncs = [p for p in host.attribution.parts if p.cause is TimeCause.HOST_WORK and p.name in launch.syncs]
    evidence = [f"{per_step:.0f} jit dispatch{'es' if per_step >= 1.5 else ''} per step over {host.steps} steps, "
                f"step time {step:.2f} ms (median {host.step_ms.median:.2f})"]
    evidence += [f"{quoted(p.name)}: {p.device_ms_per_call:.3f} ms of device work per call, {p.calls} calls"
                 for p in host.programs[:2]]
    evidence += [f"{quoted(a.name)}: {a.count_per_step:.0f} per step, {a.ms_per_step:.2f} ms per step dispatching "
                 f"({shares[TimeCause.DISPATCH]:.1%} of the loop with the devices idle)" for a in host.dispatched[:1]]
    if shares[TimeCause.UNTRACED] > 0:
        evidence.append(f"the training thread has no event for {host.untraced_host_ms_per_step:.2f} ms per step "
                        f"around the launches ({shares[TimeCause.UNTRACED]:.1%} of the loop): their own Python, "
                        "the sync that waits for the result")
    evidence += [f"{quoted(p.name)} reads device values back, waiting for the launch's result: {p.share:.1%} of "
                 "the loop with the devices idle" for p in syncs[:2]]
    if launch.awaited:
        evidence.append(f"the training thread waits for {host.awaited_launches:.0%} of its launches: it does nothing "
                        f"more until the runtime reports the program complete, {host.launch_wait_ms_per_step:.2f} ms "
                        "per step from the launch (the launch's latency, the program's run and the notice of its "
                        "end), then launches the next: a sync every step, so no launch overlaps the device's work")
    evidence.append(f"busy fraction {host.loop_busy():.3f} over the loop")
    launched = {_module_base(run.name) for run in (*host.programs, *host.dispatched)}
    many = max((p for p in programs.values() if _module_base(p.module) in launched),
               key=lambda p: len(p.parameters), default=None)
    many = many if many is not None and len(many.parameters) >= MANY_PARAMETERS else None
    if many is not None:
        evidence.append(f"{quoted(many.module)} takes {len(many.parameters)} arrays as parameters, each flattened "
                        "and handed over at every launch")
    lanes = _LANES[host.device_kind.value]
    if many is not None and not launch.awaited:
        title = (f"Launch-bound: handing {len(many.parameters)} arrays to each launch of a small program takes "
                 f"{launch.share:.0%} of the loop, {longer}")
        what = (f"Each step launches a program that runs on the device for a fraction of a millisecond and takes "
                f"{len(many.parameters)} arrays: at every launch each one is flattened out of its pytree, checked "
                "and handed over, so the host spends far longer launching than "
                f"{lanes} spend running the program, and they idle between launches.")
    elif launch.awaited:
        small = launch.device_ms_per_launch < launches.SMALL_PROGRAM_MS
        title = (f"Launch-bound: each step launches {'a small program' if small else 'its program'} and waits for "
                 f"it, {launch.share:.0%} of the loop")
        what = (f"Each step launches a program that runs on the device for "
                f"{'under a millisecond' if small else f'{launch.device_ms_per_launch:.1f} ms'} and waits for its "
                "result before launching the next, so every step pays the launch (dispatching the jitted function, "
                "handing over its arguments, the runtime's latency to start it) and the sync on its end in full, "
                f"on top of the program's run: {lanes} idle for that time every step.")
    else:
        title = f"Launch-bound: launching each step's small program takes {launch.share:.0%} of the loop, {longer}"
        what = ("Each step launches a program that runs on the device for a fraction of a millisecond, and the host "
                "spends far longer on each launch (dispatching the jitted function, flattening and handing over its "
                "arguments, and on the training thread around it: the loop's own Python and the sync that waits for "
                f"the result) than {lanes} spend running it, so they idle between launches: "
                "only more work per launch makes the loop faster.")
    return Finding(
        priority=priority,
        category=FindingCategory.DISPATCH_OVERHEAD,
        title=title,
        what=what,
        evidence=evidence,
        impact=f"{launch.host_ms_per_launch * per_step:.2f} ms of each {iteration:.2f} ms step goes to launching "
               f"({launch.share:.0%} of the loop) against {launch.device_ms_per_launch * per_step:.3f} ms of device "
               "work; with several steps per launch the step could approach its device time.",
        fix=frameworks.more_work_per_launch_fix(frameworks.detect([host]), many_arrays=many is not None),
    )


def _recompiled(programs: dict[str, HloProgram]) -> list[str]:
    """Functions compiled more than once, with the parameters whose shapes differ between the compilations (the
    first and last few of many, in order)."""
    lines = []
    for function, compiled in sorted(_by_function(programs).items(), key=lambda item: -len(item[1])):
        signatures = {tuple(p.parameters.items()) for p in compiled}
        if len(signatures) < 2:
            continue
        changing = []
        for name in dict.fromkeys(name for p in compiled for name in p.parameters):
            shapes = sorted({p.parameters.get(name, "-") for p in compiled}, key=_by_size)
            if len(shapes) > 1:
                listed = shapes if len(shapes) <= SHAPES_LISTED else [*shapes[:2], "…", shapes[-1]]
                changing.append(f"{quoted(name)} {' / '.join(listed)}"
                                + (f" ({len(shapes)} shapes)" if len(shapes) > SHAPES_LISTED else ""))
        lines.append(f"{quoted(function)} compiled {len(signatures)} times with different parameter shapes: "
                     + "; ".join(changing[:3]))
    return lines


def _by_size(shape: str) -> tuple:
    """A sort key that orders HLO shapes by their dimensions (``f32[8,9]`` before ``f32[8,10]``)."""
    parsed = Shape.parse(shape)
    return (0, parsed.dtype, parsed.dims, shape) if parsed is not None else (1, "", (), shape)


class _Growth(NamedTuple):
    line: str  # the evidence line
    along_dimension: bool  # an array grows along a dimension, not a list of arrays by one more


def _growing(programs: dict[str, HloProgram]) -> _Growth | None:
    """Where a function was compiled once for each of at least ``GROWING_COMPILATIONS`` consecutive sizes (of its
    argument count, or of one dimension of an argument): a collection that grows by one every call, such as a
    Python list of arrays appended to each step and stacked anew, or an array extended by one row each call."""
    # A list that grows makes the function that stacks it take one more argument each call, and the functions
    # after it one longer array: the list is the cause, wherever the capture lists it.
    counts, dimensions = [], []
    for function, compiled in _by_function(programs).items():
        shapes = [[shape.dims for shape in map(Shape.parse, p.parameters.values()) if shape is not None]
                  for p in compiled]
        counts.append((function, "arguments", [len(p.parameters) for p in compiled]))
        if len({tuple(map(len, dims)) for dims in shapes}) == 1:  # one argument list: compare its dimensions
            dimensions += [(function, f"dimension {axis} of argument {index}", [dims[index][axis] for dims in shapes])
                           for index, rank in enumerate(map(len, shapes[0])) for axis in range(rank)]
    for function, what, values in (*counts, *dimensions):
        distinct = sorted(set(values))
        if len(distinct) == len(values) >= GROWING_COMPILATIONS and distinct[-1] - distinct[0] == len(distinct) - 1:
            if what == "arguments":
                return _Growth(f"{quoted(function)} compiled {len(values)} times, for every count of arguments "
                               f"from {distinct[0]} to {distinct[-1]}: a collection that grows by one each call "
                               "(a Python list of arrays appended to and stacked anew)", False)
            return _Growth(f"{quoted(function)} compiled {len(values)} times, for every size of {what} from "
                           f"{distinct[0]} to {distinct[-1]}: an array that grows by one along that dimension "
                           "each call (extended with jnp.concatenate, jnp.append or a pad, or a list stacked "
                           "anew)", True)
    return None


def _by_function(programs: dict[str, HloProgram]) -> dict[str, list[HloProgram]]:
    """The compiled programs of each jitted function (``jit_step(1)`` and ``jit_step(7)`` are ``jit_step``'s)."""
    grouped: dict[str, list[HloProgram]] = {}
    for program in programs.values():
        grouped.setdefault(_module_base(program.module), []).append(program)
    return grouped


def _recompilation(host: HostEvidence, programs: dict[str, HloProgram]) -> Finding | None:
    """Compilations of a program that compiled before in the capture, or any after the warm-up; a program's
    first compilation in the loop's first steps is warm-up (:func:`_warmup`)."""
    if not host.step_ms or (host.recompiles_in_steps == 0 and host.recompile_ms_per_step == 0):
        return None
    step = host.step_ms.mean
    cost = host.recompile_cost
    share = cost.share_of_loop if cost else host.recompile_ms_per_step / step
    priority = _rank(share, COMPILE_PRIORITIES)
    if priority is None or (priority is Priority.P2 and host.recompiles_in_steps < 2):
        return None
    warmup = (f" (besides a warm-up of {host.warmup.steps} step{'s' if host.warmup.steps != 1 else ''} whose "
              f"{host.warmup.compiles} first compilations took {host.warmup.compile_ms:.1f} ms)") if host.warmup else ""
    tensorflow = frameworks.detect([host]) in (Framework.TENSORFLOW, Framework.TENSORFLOW_EAGER)
    # Recompiled, yet the function called in every step has one program in the capture (which holds every
    # executable still alive), or several of one same text: each compilation's program was dropped with the jitted
    # function that made it, or was the same program again.
    texts = {name: {p.fingerprint or p.module for p in group} for name, group in _by_function(programs).items()}
    anew = not tensorflow and host.recompiles_in_steps > 1 and any(
        len(texts.get(_module_base(call.name), ())) == 1 for call in host.programs
        if call.calls >= host.recompiles_in_steps)
    # An eager gather compiled for many index counts: boolean-mask indexing (x[mask]) or a nonzero whose size is
    # the data's, so every step's count is a new shape for it and for everything after it.
    growing = None if tensorflow or anew else _growing(programs)
    data_sized = not tensorflow and not anew and not growing and any(
        len(texts.get(name, ())) > 1 for name in DATA_SIZED)
    remedy = ("one jitted function" if anew else "a value of fixed size in place of the growing one" if growing
              else "shapes that do not follow the data" if data_sized else "stable shapes")
    if cost is None:
        title = f"Recompilation inside steps: {share:.0%} of step time compiling"
        costs = [f"recompilation {host.recompile_ms_per_step:.1f} ms per step of a {step:.1f} ms step"]
        impact = f"{host.recompile_ms_per_step:.1f} ms per step ({share:.0%}) would disappear with {remedy}."
    else:
        title = f"Recompilation inside steps: the recompiling steps cost {share:.0%} of the loop's time"
        against = (f"beyond a normal step's {cost.normal_step_ms:.2f} ms (tracing, lowering, compiling and the "
                   "program's first run)" if cost.normal_step_ms is not None else
                   "inside the jit calls that recompiled (tracing, lowering, compiling and dispatch; every step "
                   "compiles, none to compare with)")
        costs = [f"{cost.steps} recompiling steps cost {cost.ms:.1f} ms of the loop's {cost.loop_ms:.1f} ms "
                 f"{against}",
                 f"XLA compilation alone: {host.recompile_ms_per_step:.1f} ms per step of a {step:.1f} ms step"]
        impact = f"{cost.ms:.1f} ms of the loop's {cost.loop_ms:.1f} ms ({share:.0%}) would disappear with {remedy}."
    evidence = [f"{host.recompiles_in_steps} XLA recompilations inside {host.steps} profiled steps{warmup}",
                *costs, *_recompiled(programs)[:3]]
    if anew:
        evidence.append("yet the capture holds one compiled program of the function called in every step: the "
                        "executables of the earlier compilations are gone or the same program again")
    if growing:
        evidence.append(growing.line)
    # The function that took the size from the data, where its program is in the capture: jnp.unique's.
    sizers = {word: call for word, call in SIZED_BY_DATA.items() if any(word in name for name in texts)}
    if data_sized:
        evidence.append("eager gathers (or nonzero) compiled for a new number of indices: a size taken from the data "
                        "(x[mask], jnp.nonzero without size=), read back to the host and new in every step")
        evidence += [f"{quoted(name)} in the capture: jnp.{word} without size=, whose result is as long as the "
                     "data says" for word in sizers for name in sorted(texts) if word in name][:2]
    return Finding(
        priority=priority,
        category=FindingCategory.RECOMPILATION,
        title=title,
        what=("XLA compiles the step's program again and again although it keeps no other version of it: the "
              "jit's cache never finds the call it has seen, because the jitted function itself is made anew while "
              "the loop runs (jax.jit applied inside the loop, to a new lambda or functools.partial each step), or "
              "a static argument is a new object each call that hashes by identity (an instance of a plain class "
              "made in the loop), or the loop clears JAX's caches (jax.clear_caches(), called to free host memory, "
              "drops every compiled program)." if anew else
              "XLA compiles a new program every step because an argument grows by one along a dimension each "
              "time: an array extended every step (a KV cache or a generated sequence concatenated with the new "
              "token's entries, a history stacked anew), a new shape for every length."
              if growing and growing.along_dimension else
              "XLA compiles a new program every step because an argument grows by one element (or one more "
              "argument) each time: a history kept as a Python list of device arrays and stacked, concatenated or "
              "reduced whole again every step, a new shape for every length." if growing else
              "XLA compiles new programs while the loop runs because a shape follows the data: a boolean mask or "
              "nonzero selects a different number of elements each step, and that count becomes the shape of the "
              "selection and of every program after it (and is read back to the host to be known)." if data_sized
              else
              "XLA compiles new programs while the loop runs, usually because input shapes, dtypes or static "
              "arguments change from step to step, so each change costs a full compilation."),
        evidence=evidence,
        impact=impact,
        fix=("Keep shapes stable: give tf.function an input_signature with None for the varying dimension, or pad "
             "batches to a few fixed sizes." if tensorflow else
             "Make the jitted function once, outside the loop, and call that one every step (jax.jit(step) at "
             "module level or before the loop, never jax.jit(lambda ...) or jax.jit(partial(...)) inside it), and "
             "give it static arguments that compare and hash by value (a frozen dataclass, a tuple, a number), or "
             "make the config once before the loop; take jax.clear_caches() out of the loop (free host memory by "
             "dropping references to arrays instead); JAX's persistent compilation cache "
             "(jax.config.update('jax_compilation_cache_dir', ...)) then also spares the compilation across runs."
             if anew else
             "Allocate the array once at the length it will reach and write each step's new entries in place "
             "inside the jitted step (lax.dynamic_update_slice(cache, new, (0, position, 0)) or "
             "cache.at[:, position].set(new), the array donated), with the position passed as an array and the "
             "entries not yet written masked out (jnp.arange(length) <= position); where the final length is not "
             "known, grow the array in a few large steps (double its capacity) rather than by one. For a history of "
             "values (a loss a step, stacked anew), keep a running total on the device instead (total = total + "
             "loss, mean = total / count)."
             if growing and growing.along_dimension else
             "Keep what the loop needs from the history as a value of fixed size on the device: a running total "
             "(total = total + loss, mean = total / count), or a preallocated array written in place inside the "
             "jitted step (history.at[step].set(loss), the array donated); stack the list once, after the loop, "
             "where the whole history is wanted." if growing else
             ("Give the function that takes its size from the data a fixed one: " + ", ".join(sizers.values())
              + " (the size the most it can return, padded with fill_value). " if sizers else "") +
             "Keep the shapes fixed where the data picks elements: instead of x[mask], weight or mask inside the "
             "jitted step (jnp.where(mask, loss, 0), or a per-example weight that is 0 for the unselected), or "
             "select a fixed number (jnp.nonzero(mask, size=k, fill_value=0), jax.lax.top_k on a score); where a "
             "variable count cannot be avoided, pad it to a few bucket sizes." if data_sized else
             "Keep shapes and static arguments stable: pad or bucket the changing dimension to a few sizes, pass "
             "changing Python scalars as arrays rather than static arguments, and enable JAX's persistent "
             "compilation cache (jax.config.update('jax_compilation_cache_dir', ...))."),
    )


def _communication(host: HostEvidence) -> Finding | None:
    if not host.step_ms or not host.communication_ms_per_step:
        return None
    share = _share_of_step(host, host.communication_ms_per_step)
    priority = _rank(share, COMMUNICATION_PRIORITIES)
    if priority is None:
        return None
    collectives = [op for op in host.top_ops if collective(op.name)]
    return Finding(
        priority=priority,
        category=FindingCategory.COMMUNICATION,
        title=f"Communication takes {share:.0%} of each step",
        what="Collectives (all-reduce, all-gather, ...) and the waits for the other devices to reach them run on "
             "the devices' critical path instead of overlapping with compute.",
        evidence=[f"collectives {host.communication_ms_per_step:.2f} ms per step of {host.step_ms.mean:.2f} ms "
                  f"on each device (mean of {host.devices} devices)",
                  *(f"{quoted(op.name)}: {op.self_ms_per_step:.2f} ms per step" for op in collectives[:3])],
        impact=f"up to {host.communication_ms_per_step:.1f} ms per step if fully overlapped.",
        fix="Overlap communication with compute (XLA's latency-hiding scheduler, async collectives), use "
            "larger per-device batches, or pick a sharding that moves less data (reduce-scatter / FSDP).",
    )


def _accelerator_idle(host: HostEvidence) -> Finding | None:
    """Programs that XLA ran on the host's CPU in a process that had an accelerator: arrays committed to the CPU
    device (a loader's device_put to it, jax.default_device, a jit with backend='cpu'), which the step follows."""
    if host.device_kind is not DeviceKind.CPU or not host.idle_accelerator or not host.step_ms:
        return None
    busy = host.loop_busy()
    priority = _rank(busy, IDLE_PRIORITIES)
    if priority is None:
        return None
    iteration = host.step_ms.mean + (host.gap_ms_per_step or 0.0)
    programs = [p for p in host.programs if p.device_ms_per_call > 0][:3]
    return Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"The programs ran on the CPU while the {host.idle_accelerator} idled: {busy:.0%} of the loop",
        what=(f"XLA computed every program of the loop on the host's CPU threads, although the process had a "
              f"{host.idle_accelerator}, which the profile shows doing nothing: a jitted function runs where its "
              "arguments are committed, and these were on the CPU device."),
        evidence=[f"busy fraction {busy:.3f} of the XLA CPU threads over the loop (steps and the gaps between "
                  f"them), {host.step_ms.mean:.2f} ms per step",
                  f"the profile holds a {host.idle_accelerator} with no program run on it",
                  *(f"{quoted(p.name)}: {p.calls} calls, {p.ms_per_call:.3f} ms per call" for p in programs)],
        impact=(f"{busy * iteration:.1f} ms of each {iteration:.1f} ms step is computing on the CPU ({busy:.0%} of "
                "the loop); on the accelerator the same programs take a small fraction of it."),
        fix=("Run the programs on the accelerator: put the parameters and batches on it (jax.device_put(x) without "
             "a device, or onto jax.devices()[0]) and check where the step's arguments live with x.devices(); "
             "remove what commits them to the CPU (jax.device_put(x, jax.devices('cpu')[0]), "
             "jax.default_device(cpu), jax.jit(..., backend='cpu'), JAX_PLATFORMS=cpu)."),
    )


def _host_callbacks(host: HostEvidence) -> Finding | None:
    """A callback into Python inside the step (jax.pure_callback, io_callback, jax.debug.print): the device sends
    data to the host and waits, idle for the model, until the host's answer comes back; and the program that holds
    it launches slower. Its cost is the attribution's (the callback ops and those launches) where there is one.

    On a CPU the device's threads and the callback's Python share the host's cores: the callback's work moved into
    the program costs about what it costs in Python (a sort is a sort), so its time says nothing of what a change
    saves, and the finding is ranked no higher than P2 with a fix of its own."""
    callbacks = [op for op in host.top_ops if HOST_CALLBACK.search(f"{op.name} {op.expression}")]
    ms = sum(op.self_ms_per_step for op in callbacks)
    if not host.step_ms or not ms:
        return None
    attributed = _parts_named(host, TimeCause.TRANSFERS, HOST_CALLBACK_PART)
    share = max(_share_of_step(host, ms), sum(part.share for part in attributed))
    priority = _rank(share, COMMUNICATION_PRIORITIES)
    if priority is None:
        return None
    debug = all(_DEBUG_CALLBACK.match(op.name) for op in callbacks)
    on_cpu = host.device_kind is DeviceKind.CPU and not debug
    priority = Priority.P2 if on_cpu else priority
    return Finding(
        priority=priority,
        category=FindingCategory.DATA_MOVEMENT,
        title=f"Host callback: the devices wait on Python {share:.0%} of each step",
        what="The step calls back into Python on the host (jax.pure_callback, io_callback or debug.callback): "
             "the device sends the callback's inputs to the host, then waits, doing no model work, until the "
             "host has run the Python function and sent its result back; and the program that holds a callback "
             "takes longer to launch." + (_CALLBACK_ON_CPU if on_cpu else ""),
        evidence=[*(f"{quoted(op.name)}: {op.self_ms_per_step:.2f} ms per step of {host.step_ms.mean:.2f} ms"
                    for op in callbacks[:3]),
                  *(f"the loop's time waiting on host callbacks, the launches of the programs that hold them "
                    f"included: {part.ms:.1f} ms of {host.attribution.loop_ms:.1f} ms ({part.share:.1%})"
                    for part in attributed)],
        impact=f"up to {share * host.step_ms.mean:.1f} ms per step ({share:.0%} of it).",
        fix=_DEBUG_CALLBACK_FIX if debug else _CALLBACK_ON_CPU_FIX if on_cpu else _CALLBACK_FIX,
    )


_DEBUG_CALLBACK = re.compile(r"^%?debug_callback\b")
_DEBUG_CALLBACK_FIX = (
    "Take the jax.debug.print / jax.debug.callback out of the training step: on a TPU the step waits for the host "
    "to run it every time. Return the value from the step instead and print it from the host every N steps (it "
    "is then read back once per N steps), or keep the print under a flag that is off in training runs.")
_CALLBACK_FIX = (
    "Compute the callback's result on the device with jax.numpy (jnp.sort, jnp.histogram, ... run inside the "
    "jitted step), or take it off the step's critical path: call it every N steps, on values the step no longer "
    "needs, or after the step on the host.")


_CALLBACK_ON_CPU = (
    " On a CPU the program's threads and the callback's Python share the host's cores: the same work done inside "
    "the program costs about as much, so this time is what the callback's work takes, not what moving it saves.")
_CALLBACK_ON_CPU_FIX = (
    "Measure before moving it: on a CPU, computing the callback's result with jax.numpy inside the step runs the "
    "same work on the same cores and may save nothing. What saves time is less work in the callback (vectorized "
    "numpy instead of Python loops, on fewer values) or fewer calls: call it every N steps, or after the step on "
    "values the step no longer needs.")


def _parts_named(host: HostEvidence, cause: TimeCause, name: str) -> list[TimePart]:
    """The attribution's parts of one cause and name (none without an attribution)."""
    return [part for part in (host.attribution.parts if host.attribution else [])
            if part.cause is cause and part.name == name]


def _memory(metrics: Metrics) -> Finding | None:
    if not metrics.peak_memory_bytes or not metrics.memory_capacity_bytes:
        return None
    share = metrics.peak_memory_bytes / metrics.memory_capacity_bytes
    priority = _rank(share, MEMORY_PRIORITIES)
    if priority is None:
        return None
    return Finding(
        priority=priority,
        category=FindingCategory.MEMORY,
        title=f"Out-of-memory risk: peak memory at {share:.0%} of capacity",
        what="The program's peak memory is close to the device's capacity; a larger batch, a longer sequence or "
             "fragmentation can make it fail.",
        evidence=[f"peak {size(metrics.peak_memory_bytes)} of {size(metrics.memory_capacity_bytes)} "
                  f"({metrics.peak_memory_source})"],
        impact=f"{size(metrics.memory_capacity_bytes - metrics.peak_memory_bytes)} of headroom left.",
        fix="Rematerialise activations (jax.checkpoint), shard parameters and optimizer state (FSDP), donate "
            "input buffers, or lower the per-device batch with gradient accumulation.",
    )


def _custom_call_share(tools: dict[str, ToolResult]) -> float | None:
    """Percent of device time in custom calls, as XProf reports it (get_kpi_metrics, else the roofline)."""
    for tool in ("get_kpi_metrics", "get_roofline_model"):
        share = _data(tools, tool).get("custom_call_share_pct")
        if isinstance(share, (int, float)):
            return float(share)
    return None


def _roofline_caveat(tools: dict[str, ToolResult]) -> list[str]:
    """XProf's own caveat, where it applies: the roofline gives custom calls no FLOPs."""
    share = _custom_call_share(tools)
    if not share:
        return []
    return [f"custom calls take {share:.2f}% of device time (custom_call_share_pct {share:.2f}); XLA's cost model "
            "gives them 0 FLOPs, so the roofline efficiency does not count their work (XProf's caveat)"]


def _temporaries(hosts: list[HostEvidence], metrics: Metrics, tools: dict[str, ToolResult],
                 programs: dict[str, HloProgram]) -> Finding | None:
    """The step's program holds far more in intermediate buffers than its inputs and outputs need."""
    found = _step_module(hosts, tools)
    program = programs.get(str(found[0].get("module_name"))) if found else None
    if found is None or program is None:
        return None
    module, which = found
    peak = module["total_hbm_mib"] * MIB
    live = program.inputs_bytes + program.outputs_bytes + program.constants_bytes
    temporaries = peak - live
    if temporaries < TEMPORARIES_FLOOR or temporaries < TEMPORARIES_RATIO * max(live, 1):
        return None
    ratio = temporaries / max(live, 1)
    title = (f"Temporaries are {ratio:.0f}x the program's inputs, outputs and constants" if ratio <= MAX_TITLE_RATIO
             else f"Temporaries far larger than the program's inputs, outputs and constants ({size(temporaries)} "
                  f"against {size(live)})")
    share = metrics.peak_memory_bytes / metrics.memory_capacity_bytes if (
        metrics.peak_memory_bytes and metrics.memory_capacity_bytes) else None
    buffers_shown = [b for b in (_data(tools, "get_peak_allocations").get("modules") or [])
                     if b.get("module_name") == module["module_name"]]
    largest = [f"{quoted(str(b['instruction']))}: {size(b['size_mib'] * MIB)}"
               for m in buffers_shown for b in (m.get("top_buffers") or [])[:4]]
    return Finding(
        priority=Priority.P1 if share is not None and share >= 0.5 else Priority.P2,
        category=FindingCategory.MEMORY,
        title=title,
        what="At its peak the program holds intermediate buffers (activations kept for the backward pass, "
             "materialised broadcasts or attention scores) many times the size of what it reads and returns; "
             "they, not the model's state, set its memory.",
        evidence=[
            f"{which} {quoted(module['module_name'])}: peak {size(peak)} (memory_viewer buffer assignment), "
            f"inputs {size(program.inputs_bytes)}, outputs {size(program.outputs_bytes)}, constants "
            f"{size(program.constants_bytes)} (its HLO)",
            *([f"largest intermediate {quoted(program.largest_temporary)}: {size(program.largest_temporary_bytes)}"]
              if program.largest_temporary else []),
            *(f"buffer {line}" for line in largest),
            *([f"peak memory {share:.1%} of the device's capacity"] if share is not None
              else ["device memory capacity unknown"]),
        ],
        impact=f"{size(temporaries)} of the program's peak is temporaries; rematerialising or splitting them "
               "frees most of it for a larger batch or model.",
        fix="Recompute instead of storing: wrap layers in jax.checkpoint (jax.remat) with a policy that saves only "
            "the expensive results; lower the per-device batch (with gradient accumulation); donate inputs that "
            "the program replaces (donate_argnums) so outputs reuse their buffers; and shard large intermediates "
            "across devices.",
    )


def _compute(hosts: list[HostEvidence], metrics: Metrics, tools: dict[str, ToolResult],
             kernels: list[KernelShare]) -> Finding | None:
    """The busy devices are far from the hardware's limits by XProf's roofline model, or spend most of their time
    in one op that has a cheaper way to its result (a sort, a scatter). Not where the step's measured FLOP/s or
    HBM bandwidth are near the chip's peak (the model then misses work it cannot see: recomputed activations,
    fusions it zeroes)."""
    if (metrics.busy_fraction or 0) < 0.5:
        return None
    efficiency = metrics.roofline_efficiency
    near_peak = max(metrics.mfu or 0.0, metrics.hbm_bandwidth_fraction or 0.0) >= NEAR_PEAK
    priority = (None if efficiency is None or near_peak
                else _rank(efficiency, ROOFLINE_PRIORITIES, below=True))
    dominant = kernel_ops.dominant(kernels)
    if dominant is not None:
        priority = Priority.P1  # the roofline ranks no higher; an op with a cheaper way to its result no lower
    if priority is None:
        return None
    program = _data(tools, "get_roofline_model").get("program") or {}
    named = next((lines for host in hosts if (lines := _device_time(host, kernels))), [])
    top = [] if named else [op for host in hosts for op in host.top_ops][:3]
    caveat = _roofline_caveat(tools)
    in_op = f"{dominant[0].share_of_device:.0%} of their time in {dominant[1].op}" if dominant else ""
    if efficiency is not None and not near_peak:
        title = f"Devices busy but at {efficiency:.1%} of the roofline" + (f", {in_op}" if in_op else "")
        what = (f"The devices are kept busy, but the work XLA's cost model sees is "
                f"{program.get('bound_by', 'memory')}-bound and far from the hardware's limits."
                + (" Custom calls are not in that figure: their efficiency has to be read kernel by kernel."
                   if caveat else ""))
        roofline_lines = [f"roofline efficiency {efficiency:.2%}, bound by {quoted(str(program.get('bound_by')))} "
                          "(get_roofline_model)", *caveat]
    else:
        title, what, roofline_lines = f"Devices busy, {in_op}", "The devices are kept busy by one op.", []
    return Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=title + (" (custom calls not counted)" if caveat and roofline_lines else ""),
        what=what,
        evidence=[*roofline_lines,
                  *named,
                  *(f"{quoted(op.name)}: {op.self_ms_per_step:.2f} ms per step, {op.share_of_busy:.0%} of busy time"
                    for op in top)],
        impact=(f"{dominant[1].op} holds {dominant[0].share_of_device:.1%} of the device op time: a way to the "
                "same result without it gives back most of the step" if dominant else
                "the top ops above hold most of the step; each is a candidate for fusion, a better layout or "
                "a larger arithmetic intensity."),
        fix=dominant[1].fix if dominant else
            "Look at the top ops: fuse memory-bound elementwise chains under one jit, and use larger matmul tiles "
            "or batch sizes for a higher arithmetic intensity.",
    )


def _tiny_loop_ops(host: HostEvidence) -> Finding | None:
    """The busy devices spend most of their time in ops that each run hundreds of times a step for a few
    microseconds: a loop's body (a ``lax.scan`` over a sequence, a ``fori_loop``) too small for its per-op cost."""
    repeated = [op for op in host.top_ops if op.count_per_step >= LOOP_RUNS
                and op.self_ms_per_step / op.count_per_step * 1e3 <= TINY_OP_US]
    share = sum(op.share_of_busy for op in repeated)
    if (host.busy_fraction or 0) < 0.5 or share < TINY_LOOP_SHARE:
        return None
    runs = max(op.count_per_step for op in repeated)
    mean_us = sum(op.self_ms_per_step for op in repeated) / sum(op.count_per_step for op in repeated) * 1e3
    return Finding(
        priority=Priority.P0 if share * host.loop_busy() >= TINY_LOOP_P0 else Priority.P1,
        category=FindingCategory.COMPUTE,
        title=f"Tiny ops in a loop: {share:.0%} of device time in ops run {runs:.0f} times a step, "
              f"{mean_us:.1f} us each",
        what="The devices are busy, but with a loop inside the program whose body does too little per iteration: "
             "each op runs for microseconds, and the cost of running an op at all holds much of that time.",
        evidence=[f"{quoted(op.name)}: {op.count_per_step:.0f} runs per step, {op.self_ms_per_step:.3f} ms per step, "
                  f"{op.share_of_busy:.1%} of busy time" for op in repeated[:4]],
        impact=f"{share:.1%} of the devices' busy time goes to runs of {mean_us:.1f} us; fewer, larger runs do the "
               "same work for a fraction of the per-op cost.",
        fix="Give each iteration more work: unroll the loop (jax.lax.scan(..., unroll=8) or fori_loop's unroll), "
            "process several independent sequences or examples per iteration (a larger batch, jax.vmap over them), "
            "or write the body as one fused kernel (Pallas) when it must stay sequential.",
    )


def _kernel(tools: dict[str, ToolResult]) -> Finding | None:
    share = _custom_call_share(tools)
    if share is None or share < CUSTOM_CALL_SHARE:
        return None
    return Finding(
        priority=Priority.P2,
        category=FindingCategory.KERNEL,
        title=f"Custom kernels take {share:.0f}% of device time",
        what="Custom calls (library GEMMs, Pallas/Triton or vendor kernels) are opaque to XLA's cost model, so "
             "roofline numbers undercount their work; their efficiency has to be checked kernel by kernel.",
        evidence=[f"custom_call_share_pct {share:.2f} (get_kpi_metrics)"],
        impact=f"{share:.0f}% of device time is outside XLA's view.",
        fix="Inspect the kernels with get_kernel_stats and check their occupancy and tile sizes.",
    )


# --- where device time goes ---------------------------------------------------------------------

def _kernels(hosts: list[HostEvidence], works: list[KernelWork]) -> list[KernelShare]:
    """Each host's kernels that hold its device time, where one holds at least ``DOMINANT_KERNEL`` of it, with
    what their HLO computes.

    One kernel name can run in several programs (``loop_convert_fusion`` in every element-wise program): it is
    described from the programs the host launched that hold an instruction of that name, or from every program
    that does when the launches do not tell.
    """
    found = []
    for host in hosts:
        timed = roofline.timed_kernels(host, works)
        ops = host.top_ops[:MAX_KERNELS_NAMED]
        named = [ops[0], *(op for op in ops[1:] if op.share_of_busy >= NAMED_BESIDE)] if (
            ops and ops[0].share_of_busy >= DOMINANT_KERNEL) else []
        # A matmul by a wide one-hot matrix is named at any share: its finding adds up every such kernel.
        named += [op for op, ran in timed if op not in named
                  and kernel_ops.wide_one_hot(host.device_kind, max((w.one_hot_classes for w in ran), default=0))]
        ran_by_op = {id(op): ran for op, ran in timed}
        for op in named:
            ran = ran_by_op.get(id(op), [])
            found.append(KernelShare(
                host=host.host, name=op.name, hlo_op=_instruction(op) if op.expression or ran else "",
                share_of_device=_fraction(op.share_of_busy), ms_per_step=op.self_ms_per_step,
                runs_per_step=op.count_per_step, what=describe(ran),
                updates_per_element=max((w.updates_per_element for w in ran), default=0.0),
                one_hot_classes=max((w.one_hot_classes for w in ran), default=0),
                custom_calls=list(dict.fromkeys(w.custom_call for w in ran if w.custom_call)),
                programs=sorted({w.module for w in ran}),
            ))
    return found


def _one_hot_matmuls(hosts: list[HostEvidence], kernels: list[KernelShare]) -> Finding | None:
    """Matmuls by a one-hot matrix of many classes (an embedding lookup, or a sum by id, written as
    ``one_hot(ids) @ table``): nearly every multiplication is by zero, where a gather or a scatter-add moves only
    the rows it needs. The host where they take the largest share of device time."""
    worst: tuple[float, HostEvidence, list[KernelShare]] | None = None
    for host in hosts:
        wide = [k for k in kernels if k.host == host.host and kernel_ops.wide_one_hot(host.device_kind,
                                                                                      k.one_hot_classes)]
        share = sum(k.share_of_device for k in wide)
        if wide and (worst is None or share > worst[0]):
            worst = share, host, wide
    if worst is None:
        return None
    share, host, wide = worst
    loop_share = share * host.loop_busy()
    priority = _rank(loop_share, DATA_MOVEMENT_PRIORITIES)
    if priority is None:
        return None
    per = host.per()
    classes = max(k.one_hot_classes for k in wide)
    ms = sum(k.ms_per_step for k in wide)
    return Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=f"Matmuls by a one-hot matrix of {classes:,} classes take {share:.0%} of device time",
        what=("Kernels multiply by a one-hot matrix (ids == iota, as jax.nn.one_hot builds it): a lookup of rows, or "
              "its gradient's sum of rows by id, computed as a matmul in which all but one product of each row is "
              "a multiplication by zero: the device stays busy, and its matmuls' FLOPs count as useful work, while it "
              "computes nothing the result needs."),
        evidence=[f"{quoted(k.name)}: {k.ms_per_step:.2f} ms per {per} ({k.share_of_device:.1%} of device time), "
                  f"{k.runs_per_step:g} run{'' if k.runs_per_step == 1 else 's'} per {per}, {k.what}"
                  for k in sorted(wide, key=lambda k: -k.ms_per_step)[:3]],
        impact=(f"{ms:.1f} ms of device time per {per} ({loop_share:.0%} of the loop) multiplies by zero; a gather "
                "and its scatter-add cost a small part of it."),
        fix=("Look the rows up instead: jnp.take(table, ids, axis=0) or table[ids] (torch: nn.Embedding, "
             "F.embedding), whose gradient is a scatter-add of one row per id; for a sum by id, "
             "jax.ops.segment_sum(values, ids, num_segments); for a mixture of experts' dispatch and combine (a "
             "one-hot of expert and slot contracted by einsum), route by index: scatter each token into its "
             "expert's slot (.at[expert * capacity + slot].set(x)) and gather the outputs back, or sort the tokens "
             "by expert for a grouped matmul (jax.lax.ragged_dot)."
             + (" Keep the one-hot matmul only for a few thousand classes or fewer, where the matrix unit beats a "
                "gather." if host.device_kind is DeviceKind.TPU else "")),
    )


def _device_time(host: HostEvidence, kernels: list[KernelShare]) -> list[str]:
    """Evidence lines: the host's kernels that hold its device time, each with its share and what it computes.

    The kernel's name comes last, after a custom call's quoted target: a library kernel's name can be longer than
    a quoted name is read (validation), and a quote left open must not swallow the target.
    """
    per = host.per()
    return [f"device time: {k.share_of_device:.1%} of device op time ({k.ms_per_step:.2f} ms per {per}, "
            f"{k.runs_per_step:.4g} run{'' if k.runs_per_step == 1 else 's'}) in "
            + (f"{k.what}, kernel " if k.what else "kernel ") + quoted(k.name)
            for k in kernels if k.host == host.host]


# --- device-side data movement ------------------------------------------------------------------

# GPU copies between host and device memory (CUDA's MemcpyHtoD, ROCm's CopyHostToDevice).
_MEMCPY = re.compile(r"memcpy\s*(h\s*to\s*d|d\s*to\s*h|h2d|d2h)|copy\s*(host\s*to\s*device|device\s*to\s*host)",
                     re.IGNORECASE)
_CONVERT = re.compile(r"convert", re.IGNORECASE)
# Transposes, copies that only give a tensor a new layout (XLA's "copy", "copy_fusion", "copy.3"), and
# cuDNN's conversions between channels-first and channels-last.
_LAYOUT = re.compile(r"transpose|^(\w+_)?copy(_fusion)?([._]\d+)*(\.kd)?$|nchwToNhwc|nhwcToNchw", re.IGNORECASE)
_HLO_SHAPE = re.compile(r"=\s*(\S+)")
# A copy of one operand as the device trace prints it: result type, operand type, operand name.
_COPY_OF = re.compile(r"=\s*(\S+)\s+copy\((\S+)\s+%([\w.\-]+)\)")
_CONVOLUTION = re.compile(r"conv|Im\dd?2Col|implicit_gemm|cudnn", re.IGNORECASE)


def _movement(op: OpTime, computing: frozenset[str] = frozenset(), parameters: frozenset[str] = frozenset(),
              copies_argument: bool = False) -> str | None:
    """Which kind of data movement an op is: a host transfer, a dtype convert, a copy of a whole argument, a
    layout change, or none.

    ``computing``: the fusions the HLO shows computing, which are none whatever their names (a fusion is named
    after its root: a sine computed in f32 for bf16 data is a "loop_convert_fusion"). ``parameters``: the
    programs' entry parameters; a copy of one into a buffer of the same type and layout is an out-of-place
    update's first step, not a layout change. ``copies_argument``: the HLO says the op's instruction is such a
    copy, in every launched program that has one of its name (a CPU's trace prints no HLO for its ops).
    """
    if ((ASYNC_COPY.match(op.name) and HOST_MEMORY_SPACE in op.expression) or _MEMCPY.search(op.name)
            or op.name == CPU_HOST_TO_DEVICE):
        return "host_transfer"
    if {op.name, op.name.removesuffix(".kd"), op.expression} & computing:
        return None
    if copies_argument or ((copy := _COPY_OF.search(op.expression)) and copy[1] == copy[2]
                           and copy[3] in parameters):
        return "undonated"
    if _CONVERT.search(op.name):
        return "convert"
    if _LAYOUT.search(op.name):
        return "layout"
    return None


def _transfer_share(host: HostEvidence) -> float:
    """The share of device op time spent on copies between host memory and the device's."""
    return sum(op.share_of_busy for op in host.top_ops if _movement(op) == "host_transfer")


def _transferred(ops: list[OpTime]) -> tuple[float, float]:
    """Bytes the finished copies moved each step, (host to device, device to host), read from their HLO shapes."""
    to_host = to_device = 0.0
    for op in ops:
        shape = Shape.parse(match.group(1)) if op.name.startswith("copy-done") and (
            match := _HLO_SHAPE.search(op.expression)) else None
        if shape is None:
            continue
        moved = shape.bytes * op.count_per_step
        if HOST_MEMORY_SPACE in match.group(1):
            to_host += moved
        else:
            to_device += moved
    return to_device, to_host


_MOVEMENT_TEXT = {
    "host_transfer": ("Host-device memory transfers",
                      "The devices spend their time on copies between host memory and device memory (HBM): "
                      "parameters or activations offloaded to the host and brought back, or inputs copied in on "
                      "every call. A copy-done op is the device waiting for such a copy; it computes nothing."),
    "convert": ("Dtype converts",
                "Kernels whose work is converting tensors between dtypes (f32 and bf16, for example) hold the "
                "devices: the data is re-typed rather than computed on, often in a round trip that undoes itself."),
    "layout": ("Layout transposes",
               "Kernels that transpose tensors or copy them into another layout hold the devices: the data is "
               "rearranged in memory, not computed on. XLA inserts them where a producer's layout differs from "
               "the one its consumer (a convolution, a matmul) wants."),
    "undonated": ("Copies of undonated arguments",
                  "Kernels copy an argument whole into a new buffer before writing a few elements into it: the "
                  "program updates part of an array (a dynamic_update_slice, x.at[i].set(v) into a cache or "
                  "buffer) whose buffer is not donated, so the caller may still read it and every call copies all "
                  "of it first, however little it changes; eager calls (x.at[i].set one at a time) never donate."),
}


def _on_a_cpu_in_float32(fix: str) -> str:
    """A converts finding's ``fix`` on a CPU, which computes bfloat16 and float16 by converting to float32 around
    each op (measured on a scan of bf16 matmuls: the same step in float32 took 0.55 of the time)."""
    return ("On a CPU, where the converts are to and from bfloat16 or float16, compute in float32: a CPU has no "
            "arithmetic in those dtypes, so XLA converts around each op; keep them for the accelerator (cast the "
            f"parameters where the program runs on one). Otherwise: {fix[:1].lower()}{fix[1:]}")


def _movement_fix(kind: str, framework: Framework, device: DeviceKind, convolutions: bool) -> str:
    tensorflow = framework in (Framework.TENSORFLOW, Framework.TENSORFLOW_EAGER)
    if kind == "host_transfer":
        if tensorflow:
            return ("Keep the data on the device: prefetch input to the device (tf.data prefetch with "
                    "tf.distribute's experimental_distribute_dataset) and keep variables on the accelerator.")
        return ("Keep the data on the device: jax.device_put inputs and parameters once and reuse the device "
                "arrays across calls instead of moving them every call. Where the program offloads to host memory "
                "on purpose (memory kinds such as 'pinned_host', jax.checkpoint offload policies), offload only "
                "what does not fit in HBM and overlap the copies with compute; otherwise keep the arrays in "
                "device memory.")
    if kind == "undonated":
        return ("Update the array in place: donate it to the jitted function that takes and returns it "
                "(jax.jit(f, donate_argnums=(i,)) or donate_argnames; a decode step donating its KV cache) and use "
                "the returned array from then on (the donated one is invalid after the call), so XLA writes into "
                "the argument's own buffer; where the updates are eager calls (x.at[i].set(v) one at a time), make "
                "them inside one such jit, or build the array once from its parts (jnp.stack, jnp.concatenate).")
    if kind == "convert":
        if tensorflow:
            return ("Set one mixed-precision policy (tf.keras.mixed_precision.set_global_policy('mixed_bfloat16' "
                    "or 'mixed_float16')) so variables are cast once, and compile the step with "
                    "tf.function(jit_compile=True) so the remaining casts fuse into their consumers.")
        fix = ("Keep parameters and activations in the compute dtype: cast once (parameters to bf16 when they are "
               "loaded, or one mixed-precision policy) rather than on every call, avoid f32-bf16 round trips "
               "(x.astype(f32) ... .astype(bf16)), pass preferred_element_type to dots instead of converting their "
               "results, and keep the casts inside one jax.jit so they fuse into their consumers.")
        return _on_a_cpu_in_float32(fix) if device is DeviceKind.CPU else fix
    layouts = []
    if convolutions and device is DeviceKind.GPU:
        layouts.append("keep convolution activations channels-last on GPU (NHWC / NDHWC: dimension_numbers such as "
                       "('NDHWC', 'DHWIO', 'NDHWC') in lax.conv_general_dilated, or data_format='channels_last' in "
                       "TensorFlow), the layout the GPU convolution kernels want, so XLA does not transpose around "
                       "every convolution")
    if tensorflow:
        layouts.append("compile with tf.function(jit_compile=True) so XLA can assign layouts across ops")
    else:
        layouts.append("write contractions as jnp.einsum / lax.dot_general over the dimensions as they lie rather "
                       "than transposing first, transpose weights once outside the step, and keep swapaxes / "
                       "transpose calls inside one jax.jit so XLA can fold them into a consumer's layout")
    if device is DeviceKind.TPU:
        layouts.append("on TPU keep the minor-most dimension a multiple of 128")
    return "Choose layouts that need no transpose: " + "; ".join(layouts) + "."


def _movements(hosts: list[HostEvidence], programs: dict[str, HloProgram], works: list[KernelWork],
               ) -> list[tuple[DataMovement, HostEvidence, list[OpTime]]]:
    """Device time in ops that move or re-type data instead of computing (host transfers, converts, transposes):
    each kind on the host where it takes the largest share of device time, with those ops, longest first."""
    computing = frozenset(name for program in programs.values() for name in program.computing_fusions)
    parameters = frozenset(name for program in programs.values() for name in program.parameters)
    updating = frozenset(name for program in programs.values() for writers in program.undonated.values()
                         for name in writers)
    worst: dict[str, tuple[float, HostEvidence, list[OpTime]]] = {}
    for host in hosts:
        by_kind: dict[str, list[OpTime]] = {}
        copying = {id(op) for op, ran in roofline.timed_kernels(host, works) if ran
                   and all(w.copies_argument for w in ran)}
        for op in host.top_ops:
            if (kind := "undonated" if op.name.removesuffix(".kd") in updating
                    else _movement(op, computing, parameters, id(op) in copying)) is not None:
                by_kind.setdefault(kind, []).append(op)
        for kind, ops in by_kind.items():
            share = sum(op.share_of_busy for op in ops)
            if share > worst.get(kind, (0.0,))[0]:
                worst[kind] = (share, host, ops)
    movements = []
    for kind, (share, host, ops) in worst.items():
        ms = sum(op.self_ms_per_step for op in ops)
        to_device, to_host = _transferred(ops) if kind == "host_transfer" else (0.0, 0.0)
        iteration = host.step_ms.mean + (host.gap_ms_per_step or 0.0) if host.step_ms else 0.0
        updates_ms = _updates_ms(host, ops, programs, works, ms, ms / share) if kind == "undonated" else 0.0
        movement = DataMovement(kind=kind, host=host.host, ms_per_step=ms, device_ms_per_step=ms / share,
                                share_of_device=_fraction(share),
                                share_of_loop=_fraction(ms / iteration) if iteration > 0 else _fraction(share),
                                to_device_bytes_per_step=to_device, to_host_bytes_per_step=to_host,
                                updates_ms_per_step=updates_ms,
                                updates_share_of_loop=_fraction(updates_ms / iteration) if iteration > 0 else 0.0)
        movements.append((movement, host, sorted(ops, key=lambda op: -op.self_ms_per_step)))
    return movements


def _movement_priority(movement: DataMovement, host: HostEvidence) -> Priority | None:
    # A copy between host and device memory holds the device's lane, but what it costs is its share of the loop:
    # on a device that mostly waits for the host, the copy of each step's batch is most of its little op time.
    share = min(movement.share_of_device, movement.share_of_loop) if movement.kind == "host_transfer" else (
        movement.share_of_device)
    priority = _rank(share, DATA_MOVEMENT_PRIORITIES)
    if priority is None:
        return None
    if host.dispatches_per_step >= OP_BY_OP_DISPATCHES:
        # Launched op by op, the devices mostly wait for the next launch (the dispatch finding's cause); these ops
        # cost the loop only their own time, and a fused program folds most of them into their consumers.
        return _rank(movement.share_of_loop, DATA_MOVEMENT_PRIORITIES) or Priority.P2
    if priority is Priority.P0 and host.loop_busy() < 0.5:  # devices mostly idle: their own time matters less
        return Priority.P1
    return priority


def _updating_programs(host: HostEvidence, copies: list[OpTime], programs: dict[str, HloProgram],
                       works: list[KernelWork]) -> list[ProgramCalls]:
    """The launched programs that copy a whole argument first: those with an entry parameter of the copied name,
    dtype and dimensions, or whose HLO holds the copy or updates an undonated argument. Their device time is what
    updating in place saves (the copy, and the update written into it)."""
    copied = {(match[3], shape.dtype, shape.dims) for op in copies
              if (match := _COPY_OF.search(op.expression)) and (shape := Shape.parse(match[2])) is not None}
    holding = {_module_base(program.module) for program in programs.values()
               for name, text in program.parameters.items()
               if (shape := Shape.parse(text)) is not None and (name, shape.dtype, shape.dims) in copied}
    holding |= {_module_base(w.module) for op, ran in roofline.timed_kernels(host, works) if op in copies
                for w in ran if w.copies_argument}
    names = {op.name.removesuffix(".kd") for op in copies}
    holding |= {_module_base(program.module) for program in programs.values()
                if any(names.intersection(writers) for writers in program.undonated.values())}
    return [call for call in host.programs if _module_base(call.name) in holding]


def _updates_ms(host: HostEvidence, copies: list[OpTime], programs: dict[str, HloProgram], works: list[KernelWork],
                copies_ms: float, device_ms: float) -> float:
    """The device time per step of the programs that copy an undonated argument first (:func:`_updating_programs`),
    where they are the updates: the copies (``copies_ms`` of them per step) are most of that time. A step that also
    copies an argument it does not donate is the model's work, not an update: 0 then."""
    updating = _updating_programs(host, copies, programs, works)
    updates_ms = min(sum(call.device_ms_per_call * call.calls for call in updating) / max(host.steps, 1), device_ms)
    return updates_ms if copies_ms < updates_ms <= copies_ms / COPY_SHARE_OF_AN_UPDATE else 0.0


def _data_movement(movements: list[tuple[DataMovement, HostEvidence, list[OpTime]]],
                   hlo_issues: dict[str, list[HloIssue]], programs: dict[str, HloProgram],
                   works: list[KernelWork]) -> list[Finding]:
    framework = frameworks.detect([host for _, host, _ in movements])
    undonated = [program for program in programs.values() if program.undonated]
    related = {"convert": ("detect_unnecessary_convert_reduce",),
               "layout": ("detect_layout_mismatch_copies", "detect_unfused_reshapes")}
    findings = []
    for movement, host, ops in movements:
        priority = _movement_priority(movement, host)
        if priority is None:
            continue
        kind, share = movement.kind, movement.share_of_device
        ms, device_ms = movement.ms_per_step, movement.device_ms_per_step
        label, what = _MOVEMENT_TEXT[kind]
        per = host.per()
        evidence = [f"{label.lower()}: {ms:.2f} ms per {per} of {device_ms:.2f} ms of device op time "
                    f"({share:.1%}, per device, {host.devices} device{'s' if host.devices != 1 else ''}; "
                    f"{movement.share_of_loop:.1%} of the {per})"]
        evidence += [f"{quoted(op.name)}: {op.self_ms_per_step:.2f} ms per {per} ({op.share_of_busy:.1%} of device "
                     f"time), {op.count_per_step:g} run{'' if op.count_per_step == 1 else 's'} per {per}"
                     + (f", HLO {quoted(op.expression)}" if op.expression and op.expression != op.name else "")
                     for op in ops[:3]]
        if movement.to_device_bytes_per_step or movement.to_host_bytes_per_step:
            evidence.append(f"moved per {per}: {size(movement.to_device_bytes_per_step)} host to device, "
                            f"{size(movement.to_host_bytes_per_step)} device to host (from the copies' HLO shapes)")
        evidence += [f"{quoted(i.module)} {quoted(i.instruction)} (runs as {quoted(i.runs_as)}): {i.detail}"
                     for detector in related.get(kind, ()) for i in (hlo_issues.get(detector) or [])[:2]]
        if kind == "undonated":
            evidence += [f"{quoted(program.module)} updates its argument {quoted(argument)} in place into an "
                         f"output without donating it: the kernels {', '.join(map(quoted, writers[:3]))}"
                         f"{' and more' if len(writers) > 3 else ''} write into a copy of it each call"
                         for program in undonated for argument, writers in program.undonated.items()][:2]
        convolutions = any(_CONVOLUTION.search(op.name) for op in host.top_ops)
        fix = _movement_fix(kind, framework, host.device_kind, convolutions)
        relaid = _relaid_arguments(ops, programs) if kind == "layout" else []
        if relaid:
            evidence += [f"{quoted(op.name)} copies the argument {quoted(argument)} whole into another layout, "
                         f"{op.count_per_step:g} time{'' if op.count_per_step == 1 else 's'} per {per}"
                         for op, argument in relaid[:2]]
            fix = ("Store the argument in the layout the program reads, so it is not copied whole into another "
                   "layout (and back) on every call: order its axes as the program's reads and writes use them (a "
                   "KV cache with the written position's axis ahead of the batch's, each token's keys and values one "
                   "contiguous slab), and donate it. " + fix)
        title = f"{label} take {share:.0%} of device time"
        impact = (f"{ms:.1f} ms of each {device_ms:.1f} ms of device work per {per} computes nothing; without it "
                  f"the devices would finish {device_ms / max(device_ms - ms, 1e-9):.1f}x sooner.")
        updates_ms = movement.updates_ms_per_step
        if updates_ms > 0:
            updating, steps = _updating_programs(host, ops, programs, works), max(host.steps, 1)
            evidence += [f"program {quoted(call.name)} copies the argument first: {call.calls / steps:g} calls per "
                         f"{per}, {call.device_ms_per_call:.3f} ms of device work per call "
                         f"({call.share_of_device:.1%} of device time)" for call in updating[:2]]
            loop_share = movement.updates_share_of_loop
            title = f"{label}: the updates that copy them take {updates_ms / device_ms:.0%} of device time"
            impact = (f"{updates_ms:.1f} ms of device work per {per} ({loop_share:.0%} of the {per}) goes to "
                      "updates that copy their whole argument first; in place, each costs only what it writes.")
            priority = _rank(loop_share, DATA_MOVEMENT_PRIORITIES) or priority
        findings.append(Finding(
            priority=priority,
            category=FindingCategory.DATA_MOVEMENT,
            title=title,
            what=what,
            evidence=evidence,
            impact=impact,
            fix=fix,
        ))
    return findings


def _relaid_arguments(ops: list[OpTime], programs: dict[str, HloProgram]) -> list[tuple[OpTime, str]]:
    """The layout copies of a program's argument, whole, into another layout: the argument is stored in a layout
    the program does not read it in. Each with the argument's name."""
    parameters = {name for program in programs.values() for name in program.parameters}
    relaid = []
    for op in ops:
        match = _COPY_OF.search(op.expression)
        result, source = (Shape.parse(match[1]), Shape.parse(match[2])) if match else (None, None)
        if (match and match[3] in parameters and result is not None and source is not None
                and result.dims == source.dims and result.layout != source.layout):
            relaid.append((op, match[3]))
    return relaid


_COMPILER_CHECKS = {
    "detect_unnecessary_convert_reduce": ("converts", "Dtype conversions", "dtype round trips and standalone converts",
                                          "Keep one dtype through a computation (cast once at the boundary) and "
                                          "let converts fuse into their consumers under jit."),
    "detect_layout_mismatch_copies": ("copies", "Layout-changing copies", "copies that only change the layout",
                                      "Give producer and consumer the same layout: transpose once outside the hot "
                                      "loop or let XLA choose (avoid forcing layouts with explicit transposes)."),
    "detect_unfused_reshapes": ("reshapes", "Unfused reshapes and transposes",
                                "reshapes and transposes that run on their own",
                                "Run reshapes and transposes inside the jitted step so they fuse (or become "
                                "free bitcasts) instead of materialising copies."),
}


def _compiler_cost_share(hosts: list[HostEvidence], family: str) -> float:
    """The share of the step a family of data-moving ops costs, worst host: its device time, and where it is
    dispatched op by op, those dispatches at the host's measured time per dispatch."""
    shares = [0.0]
    for host in hosts:
        ops = host.op_families.get(family)
        if ops is None or not host.step_ms or host.step_ms.mean <= 0:
            continue
        per_dispatch = host.dispatch_ms_per_step / host.dispatches_per_step if host.dispatches_per_step else 0.0
        shares.append((ops.ms_per_step + ops.dispatches_per_step * per_dispatch) / host.step_ms.mean)
    return max(shares)


def _compiler(hosts: list[HostEvidence], hlo_issues: dict[str, list[HloIssue]]) -> list[Finding]:
    findings = []
    for detector, (family, label, what, fix) in _COMPILER_CHECKS.items():
        issues = hlo_issues.get(detector) or []
        if not issues:
            continue
        ops = [host.op_families.get(family) for host in hosts]
        dispatches = max((f.dispatches_per_step for f in ops if f), default=0.0)
        ms = max((f.ms_per_step for f in ops if f), default=0.0)
        findings.append(Finding(
            # Repeated op by op every step, the pattern costs a dispatch each time; inside a program, a kernel:
            # ranked by that measured cost, so that a pattern costing little never outranks a costly cause.
            priority=Priority.P1 if _compiler_cost_share(hosts, family) >= IDLE_PRIORITIES[1][0] else Priority.P2,
            category=FindingCategory.COMPILER,
            title=f"{label}: {len(issues)} found in the compiled programs",
            what=f"The HLO contains {what}; they move or re-type data without computing anything.",
            evidence=[f"{quoted(i.module)} {quoted(i.instruction)} (runs as {quoted(i.runs_as)}): {i.detail}"
                      for i in issues[:4]]
            + [f"{family}: {ms:.3f} ms of compute per step"
               + (f", {dispatches:.0f} op-by-op dispatches per step" if dispatches >= 1 else "")],
            impact=f"{ms:.2f} ms of compute per step"
                   + (f" plus the overhead of {dispatches:.0f} dispatches per step." if dispatches >= 1 else "."),
            fix=_on_a_cpu_in_float32(fix) if family == "converts" and hosts and all(
                host.device_kind is DeviceKind.CPU for host in hosts) else fix,
        ))
    return findings


def _warmup(host: HostEvidence) -> Finding | None:
    """The loop's first steps compiling each program for its first call: a one-off cost, said with its time."""
    warmup = host.warmup
    if warmup is None or warmup.steady_step_ms is None:
        return None
    plural = "s" if warmup.steps != 1 else ""
    return Finding(
        priority=Priority.P2,
        category=FindingCategory.OTHER,
        title=f"Warm-up: the first {warmup.steps} step{plural} took {warmup.ms:.1f} ms, "
              f"{warmup.compiles} first compilations",
        what="The first call of each jitted function compiles its program; the profile holds those first "
             "compilations. This is a one-off start-up cost, not recompilation: the steady-state figures in this "
             "report leave these steps out.",
        evidence=[f"warm-up: {warmup.steps} step{plural}, {warmup.ms:.1f} ms, of which {warmup.compile_ms:.1f} ms "
                  f"compiling ({warmup.compiles} XLA compilations, each program's first)",
                  f"steady state after it: {host.steps - warmup.steps} steps, median {warmup.steady_step_ms.median:.2f}"
                  f" ms, mean {warmup.steady_step_ms.mean:.2f} ms"],
        impact=f"{warmup.ms:.1f} ms once per run (per process), not per step.",
        fix="Nothing to fix in the loop. To shorten start-up, enable JAX's persistent compilation cache "
            "(jax.config.update('jax_compilation_cache_dir', ...)) or compile ahead of time "
            "(jax.jit(f).lower(...).compile()); to profile the steady state, start the trace after the first step.",
    )


SLOW_NOTABLE = 0.05  # a slow-step group costing less than this share of the loop, and not an outlier, is not said
# Slow-step differences, by what the function that runs longer in them looks like: (pattern, what, fix).
_SLOW_CAUSES = (
    (re.compile(r"compile|lower_sharding_computation|lower_jaxpr", re.IGNORECASE),
     "a compilation",
     "Keep the slow steps' programs from compiling again: pass the value that changes (a learning rate, a flag, "
     "a shape) as an array or pad it to a few sizes instead of a static argument, and enable JAX's persistent "
     "compilation cache (jax.config.update('jax_compilation_cache_dir', ...))."),
    (re.compile(r"save|checkpoint|ckpt|orbax|pickle|serializ|np\.save|torch\.save", re.IGNORECASE),
     "a synchronous save",
     "Checkpoint asynchronously (e.g. Orbax's AsyncCheckpointer / CheckpointManager with async options, which "
     "copy the arrays to the host and write them in the background) or save less often."),
    (re.compile(r"\bgc\b|garbage|collect", re.IGNORECASE),
     "garbage collection",
     "Keep Python's garbage collector out of the loop: gc.freeze() after setup, or gc.disable() with a "
     "gc.collect() every N steps outside the timed part."),
    (re.compile(r"(?<![a-z])(?:re)?load|read_array|fromfile|restore", re.IGNORECASE),
     "arrays read from disk again",
     "Read what does not change between uses once and keep it, on the device if the program uses it there "
     "(weights, a reference model, a table: load them before the loop and pass the device arrays to each call); "
     "what must be read again (a new shard), read and device_put ahead on a background thread so the steps do "
     "not wait for the disk."),
    (re.compile(r"eval|valid|predict", re.IGNORECASE),
     "an evaluation",
     "Evaluate less often, on fewer batches, or in a separate job on its own devices."),
    (re.compile(r"log|print|summar|metric|device_get|item\b", re.IGNORECASE),
     "logging that waits for the device",
     "Fetch metrics every N steps without blocking (keep them on the device and read them a step later), and "
     "write logs from a background thread."),
)


_UNNAMED_SLOW_CAUSES = ("host work", "untraced host work")  # too vague for a title: the evidence names the work


def _stepping_explains(slow: SlowSteps) -> bool:
    """Whether the stepping thread's costliest difference accounts for most of the slow steps' extra time."""
    return sum(d.share_of_loop for d in slow.differences[:1]) >= 0.5 * slow.cost_fraction


def _other_thread_explains(slow: SlowSteps) -> bool:
    """Whether another host thread's costliest difference accounts for the slow steps at least as well as the
    stepping thread's (a training thread stalled in its step runs longer there by as much, with nothing inside)
    and for most of their extra time."""
    stepping = slow.differences[0].share_of_loop if slow.differences else 0.0
    return bool(slow.elsewhere) and slow.elsewhere[0].share_of_loop >= max(stepping, 0.5 * slow.cost_fraction)


def _slow_cause(slow: SlowSteps) -> tuple[str, str]:
    """What the slow steps' differences look like, and the fix for it."""
    if _other_thread_explains(slow):
        return "another thread's work", (
            "The training thread stalls while another host thread runs the work named in the evidence: a Python "
            "thread in a long call that holds the interpreter (a numpy copy such as tobytes, pickling, "
            "compressing) keeps the training thread from returning from its launch or its sync until that call "
            "ends. Run that work in a process of its own, or in shorter calls, or with a library that does it on "
            "threads outside the Python interpreter.")
    for pattern, what, fix in _SLOW_CAUSES:
        if any(pattern.search(difference.name) for difference in slow.differences[:3]):
            return what, fix
    device_extra = (slow.slow_busy_ms or 0.0) - (slow.normal_busy_ms or 0.0)
    if device_extra >= 0.5 * (slow.slow_ms - slow.normal_ms):
        return "more device work", ("The slow steps run more device work than the others (an extra program every "
                                    "few steps): run it less often, make it cheaper, or overlap it with the steps.")
    if slow.differences:
        return "host work", ("Move the work named in the evidence off the training thread (a background thread "
                             "or process) or run it less often, so that it no longer stalls the steps.")
    return "untraced host work", ("Trace the loop with the Python tracer (python_tracer_level=1) or wrap the "
                                  "periodic work in jax.profiler.TraceAnnotation to name what runs in the slow "
                                  "steps; then move it off the training thread or run it less often.")


def _same_steps_on_more_work(slow: SlowSteps) -> bool:
    """Whether the slow steps are the normal ones on more work (a larger bucket of a padded batch, a longer
    sequence): the devices' extra work accounts for the extra time, and the training thread does nothing in them
    that the normal steps do not also do."""
    device_extra = (slow.slow_busy_ms or 0.0) - (slow.normal_busy_ms or 0.0)
    return device_extra >= 0.5 * (slow.slow_ms - slow.normal_ms) and all(
        difference.normal_ms > 0 for difference in slow.differences)


def _slow_steps(host: HostEvidence) -> Finding | None:
    """A group of steps well above the median: what runs longer in them, and its share of the loop."""
    slow = host.slow_steps
    if slow is None or host.step_source is StepSource.PROFILE_WINDOW:
        return None
    priority = _rank(slow.cost_fraction, IDLE_PRIORITIES)
    if priority is None and slow.cost_fraction < SLOW_NOTABLE and slow.slow_ms < OUTLIER_STEP * slow.normal_ms:
        return None
    if _same_steps_on_more_work(slow):
        return None
    what, fix = _slow_cause(slow)
    evidence = [
        f"{slow.steps} of {slow.compared} steps are slow (steps {', '.join(map(str, slow.indices[:8]))}): "
        f"{slow.slow_ms:.2f} ms per slow step and the gap after it, against a median of {slow.normal_ms:.2f} ms; "
        f"they take {slow.share_of_loop:.1%} of the loop's {slow.loop_ms:.1f} ms",
        *(f"runs longer in the slow steps: {quoted(d.name)} {d.slow_ms:.2f} ms per slow step against "
          f"{d.normal_ms:.2f} ms per normal step ({d.share_of_loop:.1%} of the loop)" for d in slow.differences[:3]),
    ]
    if slow.slow_busy_ms is not None and slow.normal_busy_ms is not None:
        evidence.append(f"the devices are busy {slow.slow_busy_ms:.2f} ms per slow step against "
                        f"{slow.normal_busy_ms:.2f} ms per normal step")
    if slow.slow_gap_ms - slow.normal_gap_ms >= NOTABLE_SHARE * slow.normal_ms:
        evidence.append(f"the host time after a slow step is {slow.slow_gap_ms:.2f} ms against "
                        f"{slow.normal_gap_ms:.2f} ms after a normal one")
    if not _stepping_explains(slow):
        evidence.append("no traced event on the stepping thread accounts for most of the slow steps' extra time")
    if not _stepping_explains(slow) or _other_thread_explains(slow):
        evidence += [f"meanwhile the host thread {quoted(d.thread)} runs {quoted(d.name)} {d.slow_ms:.2f} ms per slow "
                     f"step against {d.normal_ms:.2f} ms per normal step ({d.share_of_loop:.1%} of the loop)"
                     for d in slow.elsewhere[:3]]
    rest = slow.loop_ms - slow.cost_ms
    faster = f" ({slow.loop_ms / rest:.1f}x faster)" if rest >= 0.01 * slow.loop_ms else ""
    return Finding(
        priority=priority or Priority.P2,
        category=FindingCategory.OTHER,
        title=f"Slow steps: {slow.steps} of {slow.compared} steps cost {slow.cost_fraction:.0%} of the loop's time"
              + ("" if what in _UNNAMED_SLOW_CAUSES else f" ({what})"),
        what=f"A few steps take far longer than the rest, and the difference looks like {what}: "
             + ("another host thread runs the work named below, and the training thread stalls while it runs."
                if what == "another thread's work" else
                "the stepping thread spends that time on the work named below, and the loop stalls while it runs."),
        evidence=evidence,
        impact=f"{slow.cost_ms:.1f} ms of the loop's {slow.loop_ms:.1f} ms beyond what as many normal steps take; "
               f"without it the loop would take {rest:.1f} ms{faster}.",
        fix=fix,
    )


def _slow_steps_and_causes(host: HostEvidence, programs: dict[str, HloProgram]) -> list[Finding]:
    """The slow steps' finding, the recompilations' and a finding per host cause; where the slow steps are slow
    for a cause another finding names (the training thread waits in them on other host threads; they compile
    again), their evidence joins that finding (one cause, one finding)."""
    slow, recompiling, by_cause = _slow_steps(host), _recompilation(host, programs), _input_bound(host)
    causes = [finding for _, finding in by_cause]
    groups = host.slow_steps
    if slow is None or groups is None:
        return [finding for finding in (recompiling, *causes) if finding]
    # The slow steps wait on another thread: the training thread's waits differ in them, or the devices do no more
    # work in them while a cause of the loop runs on other threads (a loader, a saver, a writer).
    elsewhere = [finding for cause, finding in by_cause if host_causes.on_other_threads(host, cause)]
    no_more_device_work = (groups.slow_busy_ms is not None and groups.normal_busy_ms is not None
                           and groups.slow_busy_ms <= SAME_DEVICE_WORK * groups.normal_busy_ms)
    waited = any(THREAD_WAITING.search(difference.name) for difference in groups.differences[:3]) or (
        bool(elsewhere) and no_more_device_work)
    other_thread = next((finding for cause, finding in by_cause if cause.kind is HostCause.PRODUCER_THREAD),
                        elsewhere[0] if elsewhere else None)
    named_by = (other_thread if waited else None) or (
        recompiling if _slow_cause(groups)[0] == "a compilation" else None)
    if named_by is None:
        return [finding for finding in (slow, recompiling, *causes) if finding]
    if named_by is other_thread:
        named_by.evidence.insert(1, f"the waits gather in a few steps: {slow.evidence[0]}")
    else:
        named_by.evidence.append(f"the compilations gather in a few steps: {slow.evidence[0]}")
    return [finding for finding in (recompiling, *causes) if finding]


def _iteration(host: HostEvidence) -> Finding | None:
    """Without step markers, a step that is a repeated sequence of several programs: each program's part."""
    if not host.iteration_programs:
        return None
    per_iteration = {name: host.iteration_programs.count(name) for name in dict.fromkeys(host.iteration_programs)}
    calls = {p.name: p for p in host.programs}
    return Finding(
        priority=Priority.P2,
        category=FindingCategory.OTHER,
        title=f"Each step is a sequence of {len(host.iteration_programs)} launches of {len(per_iteration)} programs",
        what="The trace has no step markers; the loop repeats the same sequence of programs (a train and an eval "
             "program, or micro-batches and their apply), so one step here is one pass of that sequence.",
        evidence=[f"{quoted(name)}: {count} per step"
                  + (f", {calls[name].device_ms_per_call:.3f} ms of device work per call "
                     f"({calls[name].share_of_device:.1%} of device time)" if name in calls else "")
                  for name, count in per_iteration.items()],
        impact="the step time, busy fraction and peak memory in this report are per pass of the sequence.",
        fix="Nothing to fix; wrap each iteration in jax.profiler.StepTraceAnnotation('train', step_num=i) to say "
            "where a step begins.",
    )


def _calls(host: HostEvidence) -> str:
    """"N programs, each called K times" (or "called K to M times")."""
    counts = sorted({p.calls for p in host.programs})
    called = f"each called {counts[0]} times" if len(counts) == 1 else f"called {counts[0]} to {counts[-1]} times"
    return f"{host.distinct_programs} program{'s' if host.distinct_programs != 1 else ''}, {called}"


def _no_steps(host: HostEvidence, kernels: list[KernelShare]) -> Finding | None:
    if host.step_source is not StepSource.PROFILE_WINDOW:
        return None
    if not host.programs:
        return Finding(
            priority=Priority.P2,
            category=FindingCategory.OTHER,
            title="No training steps found: times cover the whole capture",
            what="The trace has no step markers and no program launches, so nothing can be normalised per step.",
            evidence=[f"host {quoted(host.host)}: step source {host.step_source.value}"],
            impact="per-step numbers in this report are for the whole capture window.",
            fix="Wrap each step in jax.profiler.StepTraceAnnotation('train', step_num=i).",
        )
    idle = host.launch_idle_fraction
    return Finding(
        priority=Priority.P2,
        category=FindingCategory.OTHER,
        title=f"No training steps: {_calls(host)}",
        what="The trace has no step markers and no single program that the host calls again and again, so the "
             "capture is not a training loop of steps; the figures are per program and for the capture as a whole.",
        evidence=[
            f"{host.launches} program launches from the host"
            + (f"; the devices idle {idle:.1%} from the first launch to the end of the last one's work"
               if idle is not None else ""),
            *(f"{quoted(p.name)}: {p.calls} calls, {p.ms_per_call:.3f} ms per call on the host, "
              f"{p.device_ms_per_call:.3f} ms of device work per call ({p.share_of_device:.1%} of device time)"
              for p in host.programs[:5]),
            *_device_time(host, kernels),
        ],
        impact="per-step numbers in this report cover the capture from the first launch.",
        fix="If this is a training loop, wrap each step in jax.profiler.StepTraceAnnotation('train', step_num=i) "
            "so that steps can be compared; if it is a benchmark, the per-program figures are the result.",
    )


def _low_utilisation(hosts: list[HostEvidence], health: Health) -> Finding:
    """When compute is idle and no rule above names the cause, say so, with what the host does."""
    busy = health.compute_fraction or 0.0
    activities = [a for host in hosts for a in host.host_activities if a.share_of_step >= NOTABLE_SHARE]
    between = [a for host in hosts for a in host.between_steps if a.share_of_step >= NOTABLE_SHARE]
    return Finding(
        priority=Priority.P1 if busy < 0.5 else Priority.P2,
        category=FindingCategory.OTHER,
        title=f"Low utilisation: compute busy {busy:.0%} of the time, no single cause found",
        what="Compute is idle for much of each step, but neither input, dispatch, compilation nor communication "
             "explains it; the host timeline below is where the time goes.",
        evidence=[f"busy fraction {busy:.3f}, {health.dispatches_per_step:.1f} jit dispatches per step",
                  *(f"host activity {quoted(a.name)}: {a.ms_per_step:.2f} ms per step ({a.share_of_step:.1%})"
                    for a in activities[:4]),
                  *(f"host work between steps {quoted(a.name)}: {a.ms_per_step:.2f} ms per gap"
                    for a in between[:2]),
                  *(f"the host waits on the devices while they idle: {h.waiting_idle_ms_per_step:.2f} ms per step"
                    for h in hosts if h.step_ms and h.waiting_idle_ms_per_step >= NOTABLE_SHARE * h.step_ms.mean)],
        impact=f"{1 - busy:.0%} of each step is idle.",
        fix="Open the trace viewer on the steps and look at what the host thread does between device runs; "
            "synchronisations (block_until_ready, host callbacks, device-to-host copies) are the usual suspects.",
    )


def _findings(hosts: list[HostEvidence], tools: dict[str, ToolResult], hlo_issues: dict[str, list[HloIssue]],
              metrics: Metrics, health: Health, programs: dict[str, HloProgram],
              movements: list[tuple[DataMovement, HostEvidence, list[OpTime]]],
              kernels: list[KernelShare], hardware: list[Finding], works: list[KernelWork]) -> list[Finding]:
    per_host = [finding for host in hosts for finding in _slow_steps_and_causes(host, programs)] + [
        finding
        for host in hosts
        for rule in (partial(_dispatch_overhead, kernels=kernels), partial(_launch_bound, programs=programs),
                     _growing_launches, _communication, _host_callbacks, _accelerator_idle, _warmup, _iteration,
                     partial(_no_steps, kernels=kernels), _tiny_loop_ops)
        if (finding := rule(host)) is not None
    ]
    if len(hosts) > 1:  # one finding per category: the worst host's
        best: dict[FindingCategory, Finding] = {}
        for finding in per_host:
            current = best.get(finding.category)
            if current is None or _ORDER[finding.priority] < _ORDER[current.priority]:
                best[finding.category] = finding
        per_host = list(best.values())
    session_wide = [_memory(metrics), _temporaries(hosts, metrics, tools, programs),
                    _compute(hosts, metrics, tools, kernels), _kernel(tools), _one_hot_matmuls(hosts, kernels)]
    # A named op with a cheaper way to its result goes before the memory and roofline findings its work causes.
    findings = (per_host + hardware + [f for f in session_wide if f is not None]
                + _data_movement(movements, hlo_issues, programs, works)
                + _compiler(hosts, hlo_issues))
    # A host callback on a CPU holds the idle time it names, at P2 for want of a measure of what moving it saves;
    # so do launches waited for, the round trip of a program of milliseconds.
    if not health.optimal and all(f.priority is Priority.P2 for f in findings) and not any(
            f.fix == _CALLBACK_ON_CPU_FIX or f.category is FindingCategory.DISPATCH_OVERHEAD for f in findings):
        findings.append(_low_utilisation(hosts, health))
    return sorted(findings, key=lambda f: _ORDER[f.priority])


def decide_status(health: Health, findings: list[Finding]) -> HealthStatus:
    """OPTIMAL only when the snapshot is healthy and no finding is P0 or P1; ``health`` is told the same."""
    urgent = [f for f in findings if f.priority is not Priority.P2]
    health.reasons = [reason for reason in health.reasons if not reason.startswith(URGENT_REASON)]
    if urgent:
        health.reasons.append(f"{URGENT_REASON}: {urgent[0].priority.value} {urgent[0].category.value}")
    health.optimal = not health.reasons
    return HealthStatus.OPTIMAL if health.optimal else HealthStatus.NEEDS_ATTENTION


# --- the report --------------------------------------------------------------------------------


def _summary(hosts: list[HostEvidence], metrics: Metrics, health: Health, findings: list[Finding],
             tools: list[ToolResult], status: HealthStatus) -> str:
    device = hosts[0].device_type if hosts else "unknown hardware"
    where = f"{len(hosts)} host{'s' if len(hosts) != 1 else ''} ({device})"
    launched = [h for h in hosts if h.programs]
    if metrics.step_time_ms is not None:
        plural = "s" if metrics.steps != 1 else ""
        first = f"{metrics.steps} profiled step{plural} of {metrics.step_time_ms:.1f} ms on {where}"
        warmed = [h for h in hosts if h.warmup and h.warmup.steady_step_ms]
        if warmed:
            warmup = warmed[0].warmup
            first += (f" (the steady state, after a warm-up of {warmup.steps} step{'s' if warmup.steps != 1 else ''} "
                      f"that took {warmup.ms:.1f} ms compiling each program for its first call)")
    elif launched:
        first = f"No training steps on {where}: {_calls(launched[0])}"
    else:
        first = f"A capture without training steps on {where}"
    busy = f"; compute is busy {metrics.busy_fraction:.0%} of the time" if metrics.busy_fraction is not None else ""
    sentences = [first + busy + "."]
    urgent = [f for f in findings if f.priority is not Priority.P2]
    if status is HealthStatus.OPTIMAL:
        low = ("idle time, communication, compilation and memory pressure are low" if health.memory_fraction
               is not None else "idle time, communication and compilation are low (the device's memory capacity is "
               "unknown, so its peak memory is not weighed against it)")
        sentences.append(f"Compute utilisation is high and {low}, so the profile needs no action.")
    elif urgent:
        sentences.append(f"The main problem ({urgent[0].priority.value}): {urgent[0].title}.")
    else:
        sentences.append(f"It is not optimal because {', and '.join(health.reasons)}.")
    others = [f for f in findings if not urgent or f is not urgent[0]]
    if others:
        sentences.append(f"{len(others)} further finding{'s' if len(others) != 1 else ''}: "
                         + "; ".join(f"{f.priority.value} {f.title}" for f in others[:3]) + ".")
    if metrics.peak_memory_bytes:
        sentences.append(f"Peak memory is {size(metrics.peak_memory_bytes)} "
                         f"({metrics.peak_memory_source.split(':')[0]}).")
    with_data = sum(t.status is ToolStatus.OK for t in tools)
    sentences.append(f"{with_data} of {len(tools)} XProf tools returned data"
                     + ("; on CPU profiles XProf's device-side tools are empty, so the signals come from the raw "
                        "trace events." if hosts and all(h.device_kind.value == "cpu" for h in hosts) else "."))
    return " ".join(sentences[:5])


_AMD_ARCHITECTURE = re.compile(r"\bgfx\d+\w*")


def _name_amd_architecture(hosts: list[HostEvidence], tools: dict[str, ToolResult]) -> None:
    """AMD GPUs by their architecture (gfx942), as XProf's device information names them, not by a CUDA-style
    "compute capability 9.4" that AMD does not use."""
    architecture = _AMD_ARCHITECTURE.search(str(_data(tools, "get_device_information").get("device_type", "")))
    for host in hosts:
        if host.device_kind is DeviceKind.GPU and host.device_type.startswith("AMD"):
            host.device_type = f"AMD GPU ({architecture.group(0)})" if architecture else "AMD GPU"


def assess(*, hosts: list[HostEvidence], tools: list[ToolResult], hlo_issues: dict[str, list[HloIssue]],
           profile: ProfileInput, versions: dict[str, str], seconds: float,
           hlo_programs: list[HloProgram] | None = None, hlo_kernels: list[KernelWork] | None = None,
           missing_evidence: dict[str, str] | None = None) -> Analysis:
    """Turn the evidence into metrics, health, findings, status and summary.

    ``hlo_programs``: each HLO program's parameters, results and largest intermediate (:func:`hlo.program_buffers`).
    ``hlo_kernels``: what each kernel of the HLO programs computes (:func:`hlo.kernel_work`).
    ``missing_evidence``: evidence that could not be collected (what -> why), recorded in the analysis.
    """
    by_name = {tool.name: tool for tool in tools}
    _name_amd_architecture(hosts, by_name)
    metrics = _metrics(hosts, by_name)
    chip = roofline.chip_of(hosts, metrics.memory_capacity_bytes, _data(by_name, "get_device_information"))
    rooflines = roofline.program_rooflines(hosts, _data(by_name, "get_hlo_op_profile"), hlo_kernels or [], chip,
                                           hlo_programs or [], _data(by_name, "get_roofline_model"))
    roofline.fill_metrics(metrics, hosts, rooflines, chip)
    health = _health(hosts, metrics)
    programs = {program.module: program for program in hlo_programs or []}
    movements = _movements(hosts, programs, hlo_kernels or [])
    kernels = _kernels(hosts, hlo_kernels or [])
    slow_precision, hardware = precision.findings(hosts, hlo_kernels or [], lambda host: chip, hlo_programs or [])
    narrow = matrix_unit.narrow_matmuls(hosts, hlo_kernels or [], chip)
    dense = sparse_updates.dense_table_updates(hosts, hlo_kernels or [])
    decompositions = linear_algebra.decompositions_every_step(hosts, hlo_kernels or [])
    unfolded = unfold.hand_written_convolutions(hosts, hlo_kernels or [])
    subsampled = subsampling.computed_then_subsampled(hosts, hlo_kernels or [], chip)
    uncached = decoding.decoding_without_a_cache(hosts, hlo_kernels or [])
    reordered = product_order.chains_in_the_costly_order(hosts, hlo_kernels or [], chip)
    copied = per_example_weights.weights_copied_per_example(hosts, hlo_kernels or [])
    summed = running_sums.triangular_running_sums(hosts, hlo_kernels or [], chip)
    pairs = pairwise.pairwise_by_broadcast(hosts, hlo_kernels or [], chip)
    kron = kronecker.kronecker_products_made_in_full(hosts, hlo_kernels or [], chip)
    masked = masked_results.mostly_masked_results(hosts, hlo_kernels or [])
    jacobian = jacobians.jacobians_built_in_full(hosts, hlo_kernels or [])
    zeroed = zeroed_work.work_multiplied_by_zero(hosts, hlo_kernels or [])
    hardware += [found[1] for found in (narrow, dense, decompositions, unfolded, subsampled, uncached, reordered,
                                        copied, summed, pairs, kron, masked, jacobian, zeroed) if found is not None]
    findings = _findings(hosts, by_name, hlo_issues, metrics, health, programs, movements, kernels, hardware,
                         hlo_kernels or [])
    status = decide_status(health, findings)
    return Analysis(
        status=status,
        summary=_summary(hosts, metrics, health, findings, tools, status),
        metrics=metrics,
        health=health,
        findings=findings,
        tools=tools,
        hosts=hosts,
        hlo_issues=hlo_issues,
        hlo_programs=hlo_programs or [],
        data_movement=[movement for movement, _, _ in movements],
        kernels=kernels,
        roofline=rooflines,
        slow_precision=slow_precision,
        narrow_matmuls=[narrow[0]] if narrow is not None else [],
        dense_updates=[dense[0]] if dense is not None else [],
        decompositions=[decompositions[0]] if decompositions is not None else [],
        unfolded_inputs=[unfolded[0]] if unfolded is not None else [],
        subsampled_results=[subsampled[0]] if subsampled is not None else [],
        uncached_decoding=[uncached[0]] if uncached is not None else [],
        costly_product_orders=[reordered[0]] if reordered is not None else [],
        per_example_weights=[copied[0]] if copied is not None else [],
        triangular_running_sums=[summed[0]] if summed is not None else [],
        pairwise_by_broadcast=[pairs[0]] if pairs is not None else [],
        kronecker_products=[kron[0]] if kron is not None else [],
        masked_results=[masked[0]] if masked is not None else [],
        full_jacobians=[jacobian[0]] if jacobian is not None else [],
        zeroed_work=[zeroed[0]] if zeroed is not None else [],
        missing_evidence=missing_evidence or {},
        profile=profile,
        versions=versions,
        seconds=seconds,
    )
