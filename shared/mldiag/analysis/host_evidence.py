"""The evidence the raw-event read collects from one host's profile, as typed data.

The reader process builds these (:mod:`mldiag.analysis.loop.raw_events`) and prints
them as JSON; the engine validates them back with pydantic (which reads these
dataclasses as it reads its own models, unknown fields refused). They are
plain dataclasses so that the reader's process does not load pydantic at all.
:mod:`mldiag.analysis.evidence` holds the rest of an analysis. Every ``name``
below comes from a profile and is untrusted text.

Times are per training step wherever a step is known (``*_per_step``), so that a
profile of 10 steps and one of 10,000 read the same.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from dataclasses import dataclass, field
from enum import StrEnum


def _evidence(cls: type) -> type:
    """A keyword-only dataclass that pydantic validates refusing unknown fields.

    The config is the plain dict pydantic reads from ``__pydantic_config__``, so pydantic is not imported here.
    """
    cls.__pydantic_config__ = {"extra": "forbid"}
    return dataclass(kw_only=True)(cls)


@_evidence
class Distribution:
    mean: float
    median: float
    p90: float
    min: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Distribution | None:
        if not values:
            return None
        ordered = sorted(values)
        return cls(
            mean=statistics.fmean(ordered),
            median=statistics.median(ordered),
            p90=ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
            min=ordered[0],
            max=ordered[-1],
        )


class DeviceKind(StrEnum):
    CPU = "cpu"
    GPU = "gpu"
    TPU = "tpu"


class StepSource(StrEnum):
    """Where the step boundaries came from, most trustworthy first."""

    STEP_MARKERS = "step_markers"  # StepTraceAnnotation / tf.profiler step events on the host
    DEVICE_STEPS = "device_steps"  # each device plane's own "Steps" line
    PROGRAM_RUNS = "program_runs"  # the only program called repeatedly: one step per call, start to start
    PROFILE_WINDOW = "profile_window"  # no steps (several programs, no markers): one window from the first launch


@_evidence
class StepSeries:
    """Per-step values, in step order (the first thousand steps of a long profile)."""

    step_ms: list[float] = field(default_factory=list)
    busy_fraction: list[float] = field(default_factory=list)
    dispatches: list[int] = field(default_factory=list)
    compile_ms: list[float] = field(default_factory=list)
    gap_before_ms: list[float] = field(default_factory=list)  # host time since the previous step ended
    truncated: bool = False
    # The last step is only part of one: a program's last run ends with its device work, not at a next run.
    last_partial: bool = False


@_evidence
class OpTime:
    """An XLA op (CPU thunk, TPU op or GPU kernel) by self time, per step on one device."""

    name: str
    count_per_step: float
    self_ms_per_step: float
    share_of_busy: float  # of the compute lanes' busy time
    expression: str = ""  # the HLO text the device trace carries, when it does


@_evidence
class OwnTime:
    """A function's part of a host activity's own time: what no function inside it that matters takes."""

    name: str
    ms_per_step: float
    reads_device: bool = False  # a device value is read back in that time (float(loss), np.asarray, ...)


@_evidence
class HostActivity:
    """What the host does inside or between steps, outermost events first (data loading, dispatch, ...)."""

    name: str
    count_per_step: float
    ms_per_step: float
    share_of_step: float  # of the mean step; for work between steps, of the mean step plus the gap after it
    encloses_dispatches: bool = False  # a scope around jit dispatches: the code that runs the step, not beside it
    # Its own time: the devices idle while it runs, less its jit dispatches, compilations, copies between host
    # and device, and waits on the device or another thread (what it costs the loop).
    self_ms_per_step: float | None = None
    thread: str = ""  # the host line it ran on
    # Who holds its own time: the functions or scopes inside it that hold a good share of it, and itself for the
    # rest, most first.
    owners: list[OwnTime] = field(default_factory=list)
    reads_device: bool = False  # it reads device values back (float(loss), .item(), np.asarray, block_until_ready)


@_evidence
class ProgramCalls:
    """A compiled program as the host launched it, with the device work each launch brought."""

    name: str
    calls: int
    ms_per_call: float  # mean duration of the launch: the host's jit dispatch, or the device's module run
    device_ms_per_call: float  # device busy time from the launch to the next launch, mean over devices
    share_of_device: float  # of the device busy time of every launch


@_evidence
class OpFamily:
    """Ops that move or re-type data rather than compute: converts, copies, reshapes (per device)."""

    ops_per_step: float = 0.0  # executed XLA ops of this family
    ms_per_step: float = 0.0
    dispatches_per_step: float = 0.0  # op-by-op jit dispatches of this family from the host
    examples: list[str] = field(default_factory=list)


@_evidence
class Warmup:
    """The loop's first steps that hold first compilations: each program compiling for its first call."""

    steps: int  # the leading steps that hold a program's first compilation
    ms: float  # their wall time, the gaps after them included
    compile_ms: float  # of which compiling
    compiles: int  # XLA backend compilations in them
    steady_step_ms: Distribution | None = None  # the steps after the warm-up


@_evidence
class RecompileCost:
    """What the steps after the warm-up that recompile cost the loop.

    A recompiling step pays for tracing the function again, lowering and compiling it, and its program's first run:
    its time beyond the median of the steps that compile nothing. Where every step compiles (no step to compare
    with), the time inside the jit calls that compiled: their tracing, lowering, compiling and dispatch.
    """

    steps: int  # steps (each with the gap after it) that hold a recompilation
    ms: float  # their time beyond that of as many normal steps, over the loop
    share_of_loop: float  # ms of the loop's wall time (the steps after the warm-up)
    loop_ms: float
    normal_step_ms: float | None = None  # the median step that compiles nothing; None where every step compiles


@_evidence
class StepDifference:
    """What the stepping thread spends more time on in slow steps than in normal ones (an event name)."""

    name: str
    slow_ms: float  # mean per slow iteration (its step and the gap after it)
    normal_ms: float  # mean per normal iteration
    share_of_loop: float  # the extra time over every slow iteration, of the loop's wall time
    thread: str = ""  # for another host thread's work: that thread


@_evidence
class SlowSteps:
    """The steps well above the median (after the warm-up), compared with the rest.

    Iterations (a step and the gap after it) are grouped by duration: a slow one is above
    ``SLOW_STEP`` times the median and the group is clearly apart from the normal ones.
    """

    steps: int  # slow iterations
    compared: int  # iterations grouped (the warm-up and a last one without its gap aside)
    indices: list[int] = field(default_factory=list)  # which steps, counting from the first of the capture
    slow_ms: float  # mean slow iteration
    normal_ms: float  # median normal iteration
    slow_gap_ms: float = 0.0  # mean gap after a slow step
    normal_gap_ms: float = 0.0
    slow_busy_ms: float | None = None  # device busy time per slow iteration, mean over devices
    normal_busy_ms: float | None = None
    loop_ms: float  # the compared iterations' wall time
    share_of_loop: float  # the slow iterations' time, of the loop's
    cost_ms: float  # their time beyond that of as many normal iterations
    cost_fraction: float  # cost_ms of the loop's wall time
    differences: list[StepDifference] = field(default_factory=list)  # the cause first, then by extra time
    # The other host threads' work by its time inside the iterations (slow against normal), the cause first: what
    # another thread does in the slow steps, where the stepping thread's own events do not account for them.
    elsewhere: list[StepDifference] = field(default_factory=list)


class TimeCause(StrEnum):
    """What a slice of the loop's wall time went to: each instant of the loop belongs to exactly one cause."""

    DEVICE_COMPUTE = "device_compute"  # a device ran compute ops (``name``: the op family)
    COLLECTIVES = "collectives"  # a device ran collectives and nothing else
    TRANSFERS = "transfers"  # copies between host and device memory, on the device or the host
    COMPILATION = "compilation"  # the devices idle while the host compiled
    DISPATCH = "dispatch"  # the devices idle while the host launched programs
    HOST_WORK = "host_work"  # the devices idle while a host function ran (``name``, on ``thread``)
    WAITING = "waiting"  # the devices idle while the stepping thread waited, with nothing traced to explain it
    # The devices idle while the stepping thread needed the Python interpreter that another thread held, running
    # Python code of its own (``name``: that thread's function, on ``thread``).
    INTERPRETER = "interpreter"
    UNTRACED = "untraced"  # the devices idle and no event on the stepping thread


@_evidence
class TimePart:
    """One named part of the loop's wall time."""

    cause: TimeCause
    name: str = ""  # function, scope, op family or program, from the profile (untrusted text)
    thread: str = ""  # the host thread the time was spent on, for host-side causes
    ms: float  # over the whole loop
    share: float  # of the loop's wall time
    useful: bool = False  # the device doing the model's work: what nothing should be cut from
    step_share: Distribution | None = None  # its share of each step (the step with the gap after it), over the
    # loop's steps: a part that takes a few steps whole (a periodic save) has a low median and a high p90 and max


@_evidence
class Attribution:
    """The loop's wall time split into named parts that sum to it: where every millisecond went."""

    loop_ms: float  # from the first step's start to the last step's end, the gaps between steps included
    steps: int
    parts: list[TimePart] = field(default_factory=list)  # largest first


@_evidence
class HostEvidence:
    """Signals from the raw events of one ``<host>.xplane.pb``."""

    host: str
    file: str
    bytes: int
    events: int  # events read: every one on host lines, the timed ones on compute lanes
    device_kind: DeviceKind
    device_type: str
    devices: int
    compute_lanes: list[str]  # the lines whose union is "busy"
    idle_accelerator: str = ""  # with XLA on the host's CPU: the accelerator the process had, doing nothing
    step_source: StepSource
    step_marker: str = ""
    steps: int
    step_ms: Distribution | None = None  # of program runs, the periods: every run but the last
    busy_fraction: float | None = None  # busy time / step time over the steps step_ms counts (time-weighted, not a
    # mean of per-step ratios: series.busy_fraction has those), each device in its own steps
    idle_ms_per_step: float | None = None
    loop_busy_fraction: float | None = None  # busy time / the loop's time, from the first step's start to the last
    # step's end, the gaps between steps included
    busy_by_device: dict[str, float] = field(default_factory=dict)  # each device's loop busy fraction, own steps
    gap_ms_per_step: float | None = None  # host time between steps, outside any step
    untraced_host_ms_per_step: float = 0.0  # loop time with no event (but the step's marker) on the stepping
    # thread and every device idle
    waiting_idle_ms_per_step: float = 0.0  # loop time the stepping thread waits on the devices while they idle
    dispatches_per_step: float = 0.0
    dispatch_ms_per_step: float = 0.0
    compile_ms_per_step: float = 0.0
    compiles_in_steps: int = 0
    communication_ms_per_step: float = 0.0
    memory_allocator_events: int = 0
    top_ops: list[OpTime] = field(default_factory=list)
    host_activities: list[HostActivity] = field(default_factory=list)
    between_steps: list[HostActivity] = field(default_factory=list)  # the stepping thread's work in the gaps
    dispatched: list[HostActivity] = field(default_factory=list)  # jit programs launched from the host, per step
    # Where those dispatches come from on the stepping thread: for each, the innermost function or scope that
    # encloses dispatches of more than one program (the code run op by op, not the wrapper of one operation);
    # ``count_per_step``: the dispatches it makes per step, ``ms_per_step``: their time.
    dispatch_origins: list[HostActivity] = field(default_factory=list)
    # The stepping thread waiting on other host threads (a queue's get, a lock) while every device idles.
    thread_wait_ms_per_step: float = 0.0
    # Other threads' innermost functions while the stepping thread waits (on them or on the devices) and the
    # devices idle: ``ms_per_step`` and ``self_ms_per_step`` are that overlap, ``thread`` the line.
    while_waiting: list[HostActivity] = field(default_factory=list)
    # Copies between host and device memory the stepping thread makes in steps (device_put, jnp.asarray of a
    # numpy array, np.asarray of a device array), outermost; ``self_ms_per_step``: while the devices idle.
    transfers: list[HostActivity] = field(default_factory=list)
    # The functions the step's code calls (outside its jit dispatches) that read device values back (float(loss),
    # np.asarray): each such call waits for the device's work; ``count_per_step``: calls per step.
    device_reads: list[HostActivity] = field(default_factory=list)
    # The stepping thread's launches that it waits on: the share of its launches in steps after which it does
    # nothing (no event but the step marker) until the runtime says their program has completed (on the host's
    # clock), resuming within a moment of it; and its time from those launches' ends to the completions, per step:
    # the launch's latency, the program's run and the notice of its end, paid every step (a sync per step).
    awaited_launches: float = 0.0
    launch_wait_ms_per_step: float = 0.0
    transfer_ms_per_step: float = 0.0  # loop time any host thread copies between host and device while the devices
    # idle: the copies above and the runtime's own work on them (a TPU's relayout of the buffers)
    launches: int = 0  # program launches in the capture: outermost jit dispatches, or a device's module runs
    distinct_programs: int = 0  # how many different programs those launches ran
    launch_idle_fraction: float | None = None  # devices idle from the first launch to the end of the last one's work
    programs: list[ProgramCalls] = field(default_factory=list)  # by device time
    op_families: dict[str, OpFamily] = field(default_factory=dict)
    series: StepSeries = field(default_factory=StepSeries)
    attribution: Attribution | None = None
    warmup: Warmup | None = None
    recompiles_in_steps: int = 0  # compilations of a program that compiled before, or after the warm-up
    recompile_ms_per_step: float = 0.0  # compilation time of those, per step
    recompile_cost: RecompileCost | None = None
    slow_steps: SlowSteps | None = None
    iteration_programs: list[str] = field(default_factory=list)  # without step markers, one iteration's program
    # launches in order, when the loop repeats a sequence of several programs

    def per(self) -> str:
        """What its per-step figures are per: "step", or "capture" where the profile has no steps."""
        return "capture" if self.step_source is StepSource.PROFILE_WINDOW else "step"

    def loop_busy(self) -> float:
        """Busy over the whole loop, the steps and the host's gaps between them (the steps' busy share where the
        loop's is not known), within 0 and 1."""
        busy = self.loop_busy_fraction if self.loop_busy_fraction is not None else self.busy_fraction
        return min(1.0, max(0.0, busy or 0.0))

    def to_json(self) -> str:
        """The evidence as the reader prints it: JSON, refusing NaN and infinities (the engine would too)."""
        return json.dumps(dataclasses.asdict(self), allow_nan=False, ensure_ascii=False)
