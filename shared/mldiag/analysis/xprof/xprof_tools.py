"""The 15 XProf tools of the managed product, run in-process on one session.

The open ``xprof`` package ships most of them as the XProf CLI's tool functions
(``xprof.cli.tools.*``); we import and call those rather than start one
``xprof <subcommand>`` process per tool. Where the managed name differs
(``get_xprof_overview`` is ``get_overview`` there) the managed name is kept;
``get_smart_suggestions`` is the ``smart_suggestion`` converter, the three
``detect_*`` tools, removed upstream, are ours (:mod:`mldiag.analysis.xprof.hlo`), and
``get_memory_profile`` reads XProf's memory profile per allocator, so that a
host allocator's capacity is never taken for the device's.

Every tool reaches XProf's converters through one client installed for the
process (:class:`SharedConverters`). It gives each tool call what the CLI would,
and in addition:

* remembers each conversion for the session, because tools ask for the same
  converter again and again (the overview alone is read by four tools);
* lets only the first op_stats conversion build XProf's op_stats cache, which
  every later op_stats tool then reads for almost nothing;
* builds op_stats in time slices when the host file's whole conversion would not fit under the memory
  ceiling, or the file is past protobuf's 2 GiB limit: the file is cut (:mod:`mldiag.analysis.profile.slices`),
  XProf builds each slice's op_stats apart, in a process per core the analysis may use
  (:mod:`mldiag.analysis.xprof.op_stats_apart`), and their merge (:mod:`mldiag.analysis.xprof.op_stats_merge`)
  is written where XProf caches the host's, so that every op_stats tool reads it (:class:`SlicedHost`);
* reserves memory from the analysis's :class:`~mldiag.analysis.xprof.budget.MemoryBudget`: a multiple
  of the profile's size for a conversion of the profile, of the module's size for a view of one
  HLO module (so that those run while op_stats is built); a tool whose conversion cannot fit under
  the analysis's memory ceiling, or that would have XProf parse a file past protobuf's 2 GiB limit,
  is skipped before it starts, its result saying what it needed and what the report lacks without it;
* answers "no data" for converters whose input the raw events show is absent
  (no allocator events, no hardware counters), as the converter itself would,
  instead of reading the whole profile again to find nothing; those converters
  wait until the raw events are read (:class:`AbsentInputs`);
* leaves a tool that nothing in the report, the analyst or the investigation reads, and whose conversion
  reads the whole profile again, to be converted where a user opens it (:data:`ON_OPEN`).

The session folder it converts is always the analysis's private copy: XProf
writes cache files next to its input.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import math
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mldiag.analysis.xprof.budget import MemoryBudget, OverBudget, beyond_ceiling, gib
from mldiag.analysis.xprof.op_stats_apart import OP_STATS_CACHE, op_stats_cost

if TYPE_CHECKING:
    from mldiag.analysis.evidence import ToolResult

MANAGED_TOOLS = (
    "get_xprof_overview",
    "get_step_trace",
    "get_kpi_metrics",
    "get_device_information",
    "get_hosts",
    "get_utilization_viewer",
    "get_smart_suggestions",
    "get_roofline_model",
    "get_hlo_op_profile",
    "detect_layout_mismatch_copies",
    "detect_unfused_reshapes",
    "detect_unnecessary_convert_reduce",
    "list_hlo_modules",
    "get_memory_profile",
    "get_peak_allocations",
)

# Converters that read XProf's per-folder op_stats cache (the first one builds it).
OP_STATS_CONVERTERS = frozenset({
    "overview_page", "input_pipeline_analyzer", "framework_op_stats", "kernel_stats", "pod_viewer",
    "op_profile", "hlo_stats", "roofline_model", "smart_suggestion",
})
# Peak memory of one conversion, in multiples of the profile's size (xprof 2.24, measured on CPU
# and device profiles; op_stats 17x for a 41 MB training loop, 41x for a 42 MB op-by-op one, whose
# events are many and small). smart_suggestion reads the whole profile again even with op_stats built.
CONVERTER_COST = {"op_stats": 41, "memory_profile": 19, "utilization_viewer": 26, "smart_suggestion": 28,
                  "tool_names": 7}  # tool_names: of what it is given (the metadata planes, to dump the HLO modules)
# XProf parses each host file as one protobuf message, which protobuf refuses past 2 GiB.
PROTOBUF_LIMIT = (1 << 31) - 1
LIGHT_COST = 1  # op_stats already built
# Cutting a file into time slices holds its largest line's columns, in multiples of the file's size.
SLICING_COST = 4
# The most a slice holds, in multiples of an equal share of the events: its cuts move to the nearest step start.
UNEVEN_SLICES = 1.25
MIN_SLICE_BYTES = 1 << 20  # below this a slice's conversion costs mostly XProf's own overhead
# What the slicing plan counts a conversion process at beside its slice's op_stats (which it counts at the whole
# file's cost per byte in this process, the overview's): more than a process converting slices holds
# (:func:`mldiag.analysis.xprof.op_stats_apart.op_stats_cost`, 48 MiB and 28x its slice). Slices so sized leave
# room for the raw-event read beside a process, and cost no more CPU in all (4 slices of `large_op_by_op` took
# 3.4 s, as 19 did).
PLANNED_PROCESS_COST = 64 << 20
MAX_SLICES = 512
# Converters that show one HLO module, read from its dumped proto, and what one reserves, in multiples of that
# proto's size: the converter's own peak is 3x to 7x (xprof 2.24, modules of 8 KB to 6.7 MB), and the tool then
# parses the text it returns. Never less than HLO_VIEW_FLOOR bytes.
HLO_VIEWS = frozenset({"graph_viewer", "memory_viewer"})
HLO_VIEW_COST = 20
HLO_VIEW_FLOOR = 8 << 20
# Parameters the tools pass that a converter does not read (the host selection becomes its paths).
_NOT_FOR_THE_CONVERTER = frozenset({"format", "tqx", "bypass_cache", "host", "hosts"})
_NO_DATA_STATUSES = frozenset({"NO_DATA", "UNAVAILABLE", "DATA_ABSENT"})


def _quiet_native_logs() -> None:
    # XProf's C++ logs every conversion step at INFO to stderr; it reads this once, at load time.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


class AbsentInputs:
    """The converters whose input the profile lacks, known once the raw events are read.

    Only what can be told absent from the raw events (:data:`KNOWN_FROM_RAW_EVENTS`)
    is asked for, and the asker waits for the answer; every other converter runs without waiting.
    """

    def __init__(self, reasons: dict[str, str] | None = None) -> None:
        """Unknown until :meth:`settle`, unless ``reasons`` are already known."""
        self._reasons: dict[str, str] = {}
        self._known = threading.Event()
        if reasons is not None:
            self.settle(reasons)

    def settle(self, reasons: dict[str, str]) -> None:
        self._reasons.update(reasons)
        self._known.set()

    def reason(self, converter: str) -> str:
        """Why ``converter`` has no input in this profile, or "" when it may have some."""
        if converter not in KNOWN_FROM_RAW_EVENTS:
            return ""
        self._known.wait()
        return self._reasons.get(converter, "")


# Converters whose input the raw events show (allocator events; TPU hardware counters).
CAN_BE_ABSENT = frozenset({"memory_profile", "utilization_viewer"})
# Smart suggestions reads op_stats (built once for every tool) and then the profile again, for two things only:
# its memory profile (allocator events) and the share of each step spent in events whose names hold one of
# SMART_SUGGESTION_EVENTS. Where the raw events show neither, that read finds nothing: the converter is given
# the op_stats beside copies of the files without their events, and answers as it would from the whole files.
SMART_SUGGESTION_EVENTS = ("barrier-cores", "debug_print")  # XProf's kEventTimeFractionAnalyzerEvents
SMART_SUGGESTION_REREADS = "smart_suggestion's reads of the profile"
KNOWN_FROM_RAW_EVENTS = CAN_BE_ABSENT | {SMART_SUGGESTION_REREADS}
# Converters that, given op_stats, read the profile's events again only for what no tool reads: the overview, for
# its inference latency table where the profile is not of training (the overview and step trace tools read its
# sections' properties and its run environment, all from op_stats). Where op_stats is merged from time slices,
# they are given the op_stats beside copies of the files without their events, instead of every slice again
# (24x a slice, two at a time, for as long as a third of the slices' conversions).
EVENTS_UNREAD = frozenset({"overview_page"})


def conversion_threads() -> int:
    """How many host files XProf converts at once when it reads several (its ``MaxParallelism``: the cores
    this process may run on)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def usable_cores(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The cores this process may keep busy: those it may run on, fewer where its container's CPU quota
    (cgroup v2's ``cpu.max``, "<quota> <period>" or "max <period>") allows less time than that."""
    cores = conversion_threads()
    try:
        with open(cpu_max, encoding="ascii") as limit:
            quota, period = limit.read().split()[:2]
    except (OSError, ValueError):
        return cores
    if not quota.isdigit() or not period.isdigit() or not int(period):
        return cores
    return max(1, min(cores, math.ceil(int(quota) / int(period))))


def slicing_plan(host_files: int, largest_file_bytes: int, budget: MemoryBudget,
                 shared_bytes: int = 0) -> tuple[int, int]:
    """Into how many time slices the session's host file is cut for XProf's op_stats, and how many processes
    convert them at once: ``(1, 1)`` when the whole conversion fits under the budget, ``(0, 0)`` when it cannot
    be done (several host files, or slices that would still not fit).

    A slice's conversion needs op_stats' cost of the slice (its share of the events and ``shared_bytes``,
    what every slice carries: the planes' metadata, :func:`mldiag.analysis.profile.slices.shared_bytes`) in a
    process of its own. Up to :func:`usable_cores` processes run at once, their slices fitting together:
    more processes need smaller slices, and each slice converts the shared bytes again, so the plan is the one
    whose bytes to convert (the events once, the shared bytes once per slice) are the fewest per process.
    """
    cost = CONVERTER_COST["op_stats"]
    if largest_file_bytes <= PROTOBUF_LIMIT and budget.fits(cost * largest_file_bytes):
        return 1, 1
    if host_files != 1 or PROTOBUF_LIMIT <= shared_bytes:
        return 0, 0
    events = largest_file_bytes - shared_bytes
    plans = []
    for processes in range(usable_cores(), 0, -1):
        room = budget.limit - processes * (PLANNED_PROCESS_COST + cost * shared_bytes)  # for the events converted at once
        if room <= 0:
            continue
        count = max(math.ceil(processes * cost * events * UNEVEN_SLICES / room),
                    -(-events // (PROTOBUF_LIMIT - shared_bytes)), 2)
        if count <= MAX_SLICES and events // count >= MIN_SLICE_BYTES:
            plans.append(((count * shared_bytes + events) / processes, int(count), processes))
    return min(plans, default=(0, 0, 0))[1:]


@dataclass
class SlicedHost:
    """A host file cut into time slices, with the op_stats merged from theirs beside them (XProf's cache)."""

    paths: list[str]
    slice_bytes: int  # the largest slice's
    why: str
    # Cut at the device's step starts, or at its program runs where nothing marks a step: XProf's step trace
    # then loses no step at a cut.
    steps_whole: bool = False

    @property
    def note(self) -> str:
        return f"from XProf's op_stats of {len(self.paths)} time slices of the profile, merged ({self.why})"


@dataclass
class SessionState:
    files: list[str]
    budget: MemoryBudget
    profile_bytes: int
    largest_file_bytes: int = 0
    absent: AbsentInputs = field(default_factory=AbsentInputs)
    # Set once the op_stats conversion, then the HLO dump, has its place in the budget's line (or will not run).
    op_stats_queued: threading.Event = field(default_factory=threading.Event)
    hlo_queued: threading.Event = field(default_factory=threading.Event)
    # Set once every process that builds op_stats has its place in the budget's line (or none will run): the
    # whole file's conversion, or each process converting time slices, which queue only once the file is cut (and,
    # where they take every core the analysis may use, once the first of them has no slice left). The raw-event read
    # queues then.
    op_stats_conversions_queued: threading.Event = field(default_factory=threading.Event)
    # What the raw-event read of the (one) host file reserves once cutting it has counted its events, and set once
    # the read has its place in the budget's line: where it fits beside the first process converting slices, it
    # queues before the others (:func:`_slices_op_stats`).
    read_cost: Callable[[SessionState], int] | None = None
    read_queued: threading.Event = field(default_factory=threading.Event)
    results: dict[str, Any] = field(default_factory=dict)
    key_locks: dict[str, threading.Lock] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    op_stats_lock: threading.Lock = field(default_factory=threading.Lock)
    op_stats_built: bool = False
    hlo_dumped: bool = False
    hlo_module_bytes: dict[str, int] = field(default_factory=dict)  # each dumped module's proto size, by name
    shared_bytes: int = 0  # what every time slice of the (one) host file would carry
    events: int = 0  # every event of the (one) host file, once cutting it into time slices has counted them
    host_thread_events: int = 0  # and those on its host threads, where its programs run on devices (TimeSlices)
    steps: int = 0  # and the starts of its steps, or of its program runs where nothing marks a step (TimeSlices)
    sliced: SlicedHost | None = None  # once op_stats is built from time slices
    slicing_failed: Exception | None = None

    def slicing_plan(self, budget: MemoryBudget | None = None) -> tuple[int, int]:
        """:func:`slicing_plan` of this session, under ``budget`` (its own by default)."""
        return slicing_plan(len(self.files), self.largest_file_bytes, budget or self.budget, self.shared_bytes)

    def whole_conversion_queued(self) -> None:
        """The whole file's op_stats conversion has its place in line: it is the only one."""
        self.op_stats_queued.set()
        self.op_stats_conversions_queued.set()

    def lock_for(self, key: str) -> threading.Lock:
        with self.lock:
            return self.key_locks.setdefault(key, threading.Lock())


def _client_class() -> type:
    """The client class; it derives from XProf's, so it is made when xprof is first imported."""
    from xprof.cli.internal.oss import xprof_client

    class SharedConverters(xprof_client.LocalXprofClient):
        """XProf's local client, sharing conversions within each registered session folder."""

        def __init__(self) -> None:
            super().__init__()
            self._sessions: dict[str, SessionState] = {}
            self._registry = threading.Lock()

        @contextlib.contextmanager
        def session(self, folder: Path, state: SessionState) -> Iterator[None]:
            key = os.path.realpath(folder)
            with self._registry:
                self._sessions[key] = state
            try:
                yield
            finally:
                with self._registry:
                    self._sessions.pop(key, None)

        def _state(self, session_id: str) -> SessionState:
            state = self._sessions.get(os.path.realpath(self.get_run_dir(session_id)))
            if state is None:
                raise FileNotFoundError(f"{session_id} is not a session being analysed")
            return state

        def fetch(self, tool_name: str, session_id: str, rpc_deadline_s: int = 600, **kwargs: Any) -> tuple[Any, Any]:
            del rpc_deadline_s
            from xprof.convert import raw_to_tool_data

            converter = tool_name.removesuffix(".json")
            converter = "op_profile" if converter == "hlo_op_profile" else converter
            state = self._state(session_id)
            paths = list(self.select_paths(session_id, host=kwargs.get("host"), hosts=kwargs.get("hosts")))
            if converter in xprof_client.SINGLE_HOST_TB_TOOLS and len(paths) > 1:
                raise ValueError(f"{converter} reads one host's trace; this session has {len(paths)}")
            if state.absent.reason(converter):
                return "application/json", None  # what a converter returns when it has nothing
            params = {k: v for k, v in kwargs.items() if k not in _NOT_FOR_THE_CONVERTER}
            key = json.dumps([converter, paths, params], sort_keys=True, default=str)
            with state.lock_for(key):
                if key not in state.results:
                    with self._conversion(state, converter, _module_of(converter, params), paths) as paths:
                        data, content_type = raw_to_tool_data.xspace_to_tool_data(
                            paths, converter, {**params, "use_saved_result": True}
                        )
                    state.results[key] = (content_type, data)
            return state.results[key]

        @contextlib.contextmanager
        def _conversion(self, state: SessionState, converter: str, module: str,
                        paths: list[str]) -> Iterator[list[str]]:
            """Reserve what the conversion needs, or raise :class:`Skipped`; yields the files XProf is to read."""
            what = f"XProf's {converter} converter"
            if converter in OP_STATS_CONVERTERS:
                with state.op_stats_lock:
                    if not state.op_stats_built:
                        slices, processes = state.slicing_plan()
                        if slices == 1:  # the first conversion builds the cache every later one reads
                            cost = max(CONVERTER_COST.get(converter, LIGHT_COST), CONVERTER_COST["op_stats"])
                            with state.budget.reserve(cost * state.profile_bytes, what,
                                                      queued=state.whole_conversion_queued):
                                yield paths
                            state.op_stats_built = True
                            return
                        if not slices:
                            raise Skipped(_over_protobuf_limit(state.largest_file_bytes)
                                          if state.largest_file_bytes > PROTOBUF_LIMIT else beyond_ceiling(
                                              CONVERTER_COST["op_stats"] * state.profile_bytes,
                                              state.budget.ceiling))
                        if state.slicing_failed is not None:  # one failure is every op_stats tool's
                            raise state.slicing_failed
                        try:
                            state.sliced = _build_sliced_op_stats(state, slices, processes)
                        except Exception as error:
                            state.slicing_failed = error
                            raise
                        state.op_stats_built = True
                if (converter == "smart_suggestion" and state.absent.reason(SMART_SUGGESTION_REREADS)
                        or converter in EVENTS_UNREAD and state.sliced is not None):
                    with state.budget.reserve(LIGHT_COST * state.profile_bytes, what):
                        yield _without_events(state)
                    return
                if state.sliced is not None:  # reading the profile again, XProf reads the slices, a few at a time
                    per_slice = CONVERTER_COST.get(converter, LIGHT_COST) * state.sliced.slice_bytes
                    at_once = min(conversion_threads(), len(state.sliced.paths))
                    with state.budget.reserve(per_slice * at_once, what):
                        yield state.sliced.paths
                    return
            if converter not in HLO_VIEWS and state.largest_file_bytes > PROTOBUF_LIMIT:
                raise Skipped(_over_protobuf_limit(state.largest_file_bytes))
            needed = _reservation(state, converter, module)
            # A view of one HLO module (a few MB) is what the detectors and follow-ups read: never refused.
            reserved = state.budget.reserve_all_needed(needed) if module else state.budget.reserve(needed, what)
            with reserved:
                yield paths

        def build_op_stats(self, session_id: str) -> None:
            """Build XProf's op_stats cache of the session, which every op_stats tool then reads."""
            state = self._state(session_id)
            try:
                self.fetch(tool_name="overview_page", session_id=session_id)
            finally:  # whatever happened, nothing waits for this conversion to queue any more
                state.op_stats_queued.set()
                state.op_stats_conversions_queued.set()

        def dump_hlo(self, session_id: str) -> None:
            """Have XProf write each HLO module's proto into the session folder, where the HLO tools read them.

            XProf is given copies of the files' metadata planes, which hold the modules
            (:mod:`mldiag.analysis.profile.xspace`); a file that cannot be walked that way goes whole.
            """
            from xprof.convert import raw_to_tool_data

            state = self._state(session_id)
            try:
                with state.lock_for("hlo_protos"):
                    if state.hlo_dumped:
                        return
                    folder = Path(self.get_run_dir(session_id))
                    with tempfile.TemporaryDirectory(prefix="hlo-source-", dir=folder.parent) as staging:
                        sources = _hlo_sources([Path(f) for f in state.files], Path(staging))
                        if sources:
                            source_bytes = sum(source.stat().st_size for source in sources)
                            with state.budget.reserve_all_needed(CONVERTER_COST["tool_names"] * source_bytes,
                                                                 queued=state.hlo_queued.set):
                                raw_to_tool_data.xspace_to_tool_names([str(source) for source in sources])
                        for proto in Path(staging).glob("*.hlo_proto.pb"):
                            state.hlo_module_bytes[proto.name.removesuffix(".hlo_proto.pb")] = proto.stat().st_size
                            proto.replace(folder / proto.name)
                    state.hlo_dumped = True
            finally:  # whatever happened, nothing waits for the dump to queue any more
                state.hlo_queued.set()

        def read_owned_op_stats_bytes(self, session_id: str, xspace_paths: Any = None) -> bytes | None:
            # The private folder holds only this session's op_stats, so it is ours without XProf's
            # ownership bookkeeping (kept in a per-user cache folder we do not write).
            del xspace_paths
            path = Path(self.get_run_dir(session_id)) / "ALL_HOSTS.op_stats_v2.pb"
            return path.read_bytes() if path.is_file() else None

    return SharedConverters


def _reservation(state: SessionState, converter: str, module: str) -> int:
    """Bytes one conversion reserves: for a view of one dumped HLO module, by the module's size."""
    if converter in HLO_VIEWS and module in state.hlo_module_bytes:
        return max(HLO_VIEW_COST * state.hlo_module_bytes[module], HLO_VIEW_FLOOR)
    return CONVERTER_COST.get(converter, LIGHT_COST) * state.profile_bytes


def _build_sliced_op_stats(state: SessionState, count: int, processes: int) -> SlicedHost:
    """Cut the session's one host file into ``count`` time slices, have XProf build each slice's op_stats (in up
    to ``processes`` processes at once, as the budget allows), and write their merge where XProf looks for the
    host's."""
    from mldiag.analysis.profile.slices import PROGRAMS_LINE, STEPS_LINE, slice_by_time
    from mldiag.analysis.xprof.op_stats_merge import merge_time_slices

    source = Path(state.files[0])
    folder = source.parent.with_name(f"{source.parent.name}.op-stats-slices")
    folder.mkdir()
    try:
        with state.budget.reserve(SLICING_COST * state.largest_file_bytes, "cutting the profile into time slices",
                                  queued=state.op_stats_queued.set):
            sliced = slice_by_time(source, count, folder)
        state.events, state.host_thread_events, state.steps = sliced.events, sliced.host_thread_events, sliced.steps
        per_slice = _slices_op_stats(state, sliced.paths, min(processes, len(sliced.paths)))
    finally:
        state.op_stats_queued.set()
    gaps = {"device": 1000 * sliced.gaps_ns("/device:"), "host": 1000 * sliced.gaps_ns("/host:")}
    if sliced.op_extents_ns:  # a device's duty cycle spans its ops; without steps, so does its total time
        gaps["device_ops"] = 1000 * sliced.gaps_ns("/device:", ops_only=True)
        if sliced.cut_at != STEPS_LINE:
            gaps["device"] = gaps["device_ops"]
    (folder / OP_STATS_CACHE).write_bytes(merge_time_slices(per_slice, gaps_ps=gaps))
    why = ("the file is past protobuf's 2 GiB limit" if state.largest_file_bytes > PROTOBUF_LIMIT
           else "the whole file's conversion would not fit under the memory ceiling")
    return SlicedHost([str(path) for path in sliced.paths], max(path.stat().st_size for path in sliced.paths), why,
                      steps_whole=sliced.cut_at in (STEPS_LINE, PROGRAMS_LINE))


def _without_events(state: SessionState) -> list[str]:
    """Copies of the session's files without their events (:func:`mldiag.analysis.profile.slices.without_events`),
    beside its op_stats (XProf's cache)."""
    from mldiag.analysis.profile.slices import without_events

    with state.lock_for("without_events"):
        first = Path(state.files[0])
        folder = first.parent.with_name(f"{first.parent.name}.without-events")
        if not folder.is_dir():
            staging = folder.with_name(f".{folder.name}")
            staging.mkdir()
            for xplane in map(Path, state.files):
                without_events(xplane, staging / xplane.name)
            built = Path(state.sliced.paths[0]).parent if state.sliced else first.parent
            shutil.copyfile(built / OP_STATS_CACHE, staging / OP_STATS_CACHE)
            staging.rename(folder)
        return [str(folder / Path(xplane).name) for xplane in state.files]


# Once op_stats is built, the raw-event read (about 1 to 1.6 us an event) and the tools' own work on op_stats
# (decoding XProf's step trace above all: about 130 us a step) run beside each other. The read goes before the
# slices' conversions only where it takes more than twice as long as that work: with more events a step than this.
# Measured on two cores: 3,777 events a step (large_op_by_op), the read first took 0.69-0.83x the time; 154
# (large), 1.02-1.08x.
READ_FIRST_EVENTS_PER_STEP = 300


def _slices_op_stats(state: SessionState, paths: list[Path], workers: int) -> list[bytes]:
    """XProf's op_stats of each slice, serialized, in the order of ``paths``: built by up to ``workers`` processes
    at once, each reserving, for as long as it runs, what converting the largest slice holds, and converting the
    next slice not yet taken until none is left.

    Where the raw-event read fits beside the first process and is the longer of what is left once op_stats is
    built (:data:`READ_FIRST_EVENTS_PER_STEP`), it queues right behind that process and the other processes
    behind the read: the read (on one core) then overlaps the conversions, and a process that starts once it ends
    takes only the slices still waiting. Otherwise every process queues before it, and where they take every core
    the read waits until a process finds no slice left to take and ends: the conversions run on every core, then
    the read on the core that process leaves, beside the other processes' last slices and then the tools' own work
    on op_stats."""
    from mldiag.analysis.xprof.op_stats_apart import op_stats_process

    waiting = list(reversed(paths))
    taken = threading.Lock()
    built: dict[Path, bytes] = {}
    cost = op_stats_cost(max(path.stat().st_size for path in paths))
    read_beside = (state.read_cost is not None and state.events > READ_FIRST_EVENTS_PER_STEP * state.steps
                   and state.budget.fits(cost + state.read_cost(state)))
    read_after = not read_beside and workers >= usable_cores()
    unqueued = [workers]

    def queued() -> None:  # called under the budget's lock, one process at a time
        unqueued[0] -= 1
        if read_beside or not unqueued[0] and not read_after:
            state.op_stats_conversions_queued.set()

    def next_slice() -> Path | None:
        with taken:
            return waiting.pop() if waiting else None

    def convert(worker: int) -> None:
        if worker and read_beside:
            state.read_queued.wait()
        try:
            with state.budget.reserve(cost, "XProf's op_stats converter on time slices", queued=queued):
                path = next_slice()
                if path is None:
                    return
                try:
                    with op_stats_process() as op_stats:
                        while path is not None:
                            alone = path.parent / f".{path.name}.alone" / path.name  # XProf caches beside each
                            try:
                                alone.parent.mkdir()
                                os.link(path, alone)
                                built[path] = op_stats(alone)
                            finally:
                                shutil.rmtree(alone.parent, ignore_errors=True)
                            path = next_slice()
                except BaseException:
                    with taken:  # one failure is the whole op_stats': the other processes take nothing more
                        waiting.clear()
                    raise
        finally:  # every slice is taken and this core is free: the read may use it beside the last slices
            state.op_stats_conversions_queued.set()

    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="mldiag-op-stats-slices") as pool:
            for done in [pool.submit(convert, worker) for worker in range(workers)]:
                done.result()
    finally:
        state.op_stats_conversions_queued.set()
    return [built[path] for path in paths]


def _module_of(converter: str, params: dict[str, Any]) -> str:
    """The HLO module a per-module view shows ("" for any other conversion)."""
    if converter == "graph_viewer":
        return str((params.get("graph_viewer_options") or {}).get("module_name") or "")
    if converter == "memory_viewer":
        return str(params.get("module_name") or "")
    return ""


def _hlo_sources(files: list[Path], staging: Path) -> list[Path]:
    """What XProf reads to dump the HLO modules: each file's metadata plane, copied into ``staging``.

    A file that is not in the wire format is handed over whole, for XProf to judge.
    """
    from mldiag.analysis.profile.xspace import METADATA_PLANE, MalformedXSpace, plane_bytes

    sources = []
    for xplane in files:
        try:
            metadata = plane_bytes(xplane, METADATA_PLANE)
        except MalformedXSpace:
            sources.append(xplane)
            continue
        if metadata:  # no metadata plane, no HLO modules
            source = staging / xplane.name
            source.write_bytes(metadata)
            sources.append(source)
    return sources


_installed: Any = None
_install_lock = threading.Lock()


def shared_converters() -> Any:
    """The process's converter client, installed as XProf's client on first use."""
    global _installed
    with _install_lock:
        if _installed is None:
            _quiet_native_logs()
            from xprof.cli.internal.oss import xprof_client

            _installed = _client_class()()
            xprof_client.set_client(_installed)
        return _installed


class Skipped(Exception):
    """A tool that cannot run within the analysis's limits; the message says why."""


def _over_protobuf_limit(nbytes: int) -> str:
    return f"a host file is {gib(nbytes)}, past the 2 GiB protobuf limit of XProf's converters"


@dataclass
class ToolContext:
    """What a tool needs: the private session folder, the shared conversions of it, and the memory budget."""

    folder: Path
    client: Any
    hlo: Callable[[], Any]  # the parsed HLO modules, loaded once on first use
    budget: MemoryBudget
    profile_bytes: int
    timelines: tuple[Path, ...]  # every event of each file, as the raw-event read saved it, in XProf's file order
    state: SessionState  # the conversions' own record, where the tools' client keeps it

    @property
    def session_id(self) -> str:
        return str(self.folder)

    def private_paths_hidden(self, message: str) -> str:
        """XProf names the folder it read in its messages; ours is a scratch copy, so say the session."""
        return message.replace(str(self.folder), self.folder.name)


_TOOL_MODULES: set[str] = set()


def preload_tools() -> None:
    """Import XProf's tool modules ahead of use (the engine does it while the events are read)."""
    for module in _TOOL_MODULES:
        importlib.import_module(module)


def _xprof_tool(module: str, function: str) -> Callable[[ToolContext], Any]:
    _TOOL_MODULES.add(module)

    def run(context: ToolContext) -> Any:
        tool = getattr(importlib.import_module(module), function)
        implementation = getattr(tool, "__wrapped__", tool)  # past XProf's on-disk result cache
        # Tools that call other tools (get_kpi_metrics reads get_overview) reach that cache again;
        # bypassing it keeps every answer to this session's own conversions, shared in memory.
        if "bypass_cache" in inspect.signature(implementation).parameters:
            return implementation(context.session_id, bypass_cache=True)
        return implementation(context.session_id)

    return run


# Allocators of host memory (pinned staging buffers, host offload); every other allocator is a device's.
HOST_ALLOCATOR = re.compile(r"host|cpu|pinned", re.IGNORECASE)


def _gib(nbytes: Any) -> float:
    """Bytes as GiB the way XProf's tool reports them: two decimals, -1.0 when unknown."""
    return round(int(nbytes) / 2**30, 2) if int(nbytes) >= 0 else -1.0


def _peak_in_use(summary: dict[str, Any]) -> int:
    return int((summary.get("peakStats") or {}).get("peakBytesInUse", -1))


def _device_memory_profile(context: ToolContext) -> dict[str, Any]:
    """XProf's memory profile summary, from the devices' allocators only.

    XProf's own tool reports the largest capacity of any allocator, which on GPU is the host's pinned
    allocator (``gpu_host_bfc``, 64 GiB) rather than the device's (``GPU_0_bfc``). Here capacity and
    peak are those of the device allocator with the highest peak; host allocators are listed, not used.
    """
    hosts: list[str | None] = [None]
    if len(context.client.select_paths(context.session_id)) > 1:  # the converter reads one host at a time
        hosts = [h.get("hostname") if isinstance(h, dict) else h
                 for h in context.client.get_hosts(context.session_id, with_metadata=True)]
    allocators: dict[str, dict[str, Any]] = {}
    for host in hosts:
        _, data = context.client.fetch(tool_name="memory_profile.json", session_id=context.session_id, host=host)
        profile = _decoded(data) if data else {}
        for name, stats in ((profile if isinstance(profile, dict) else {}).get("memoryProfilePerAllocator")
                            or {}).items():
            allocators[f"{host}:{name}" if host else name] = stats.get("profileSummary") or {}
    device = {name: summary for name, summary in allocators.items() if not HOST_ALLOCATOR.search(name)}
    allocator, summary = max(device.items(), key=lambda item: _peak_in_use(item[1]), default=("", {}))
    stats = summary.get("peakStats") or {}
    capacity, in_use = int(summary.get("memoryCapacity", -1)), _peak_in_use(summary)
    fragmentation = float(stats.get("fragmentation", -1.0))
    return {
        "memory_capacity_gib": _gib(capacity) if capacity > 0 else -1.0,
        "peak_memory_usage_gib": _gib(in_use) if in_use > 0 else -1.0,
        "peak_usage_details": {
            "stack_reservation_gib": _gib(stats.get("stackReservedBytes", -1)),
            "heap_allocation_gib": _gib(stats.get("heapAllocatedBytes", -1)),
            "free_memory_gib": _gib(stats.get("freeMemoryBytes", -1)),
            "fragmentation_percent": round(fragmentation * 100, 2) if fragmentation >= 0 else -1.0,
            "utilization_percent": round(100 * in_use / capacity, 2) if capacity > 0 and in_use > 0 else -1.0,
        },
        "allocator": allocator,
        "device_allocators": len(device),
        "host_allocators_ignored": sorted(set(allocators) - set(device)),
    }


def _converter(name: str) -> Callable[[ToolContext], Any]:
    def run(context: ToolContext) -> Any:
        _, data = context.client.fetch(tool_name=name, session_id=context.session_id)
        return data

    return run


def _detector(name: str) -> Callable[[ToolContext], Any]:
    def run(context: ToolContext) -> Any:
        from mldiag.analysis.xprof import hlo

        issues = getattr(hlo, name)(context.hlo())
        return [issue.model_dump(mode="json") for issue in issues]

    return run


TOOLS: dict[str, Callable[[ToolContext], Any]] = {
    "get_xprof_overview": _xprof_tool("xprof.cli.tools.get_overview_tool", "get_overview"),
    "get_step_trace": _xprof_tool("xprof.cli.tools.get_step_trace_tool", "get_step_trace"),
    "get_kpi_metrics": _xprof_tool("xprof.cli.tools.get_kpi_metrics_tool", "get_kpi_metrics"),
    "get_device_information": _xprof_tool("xprof.cli.internal.xprof_data", "get_device_information"),
    "get_hosts": _xprof_tool("xprof.cli.internal.xprof_data", "get_hosts"),
    "get_utilization_viewer": _xprof_tool("xprof.cli.tools.get_utilization_viewer_tool", "get_utilization_viewer"),
    "get_smart_suggestions": _converter("smart_suggestion"),
    "get_roofline_model": _xprof_tool("xprof.cli.tools.get_roofline_model_tool", "get_roofline_model"),
    "get_hlo_op_profile": _xprof_tool("xprof.cli.internal.xprof_data", "get_hlo_op_profile"),
    "detect_layout_mismatch_copies": _detector("detect_layout_mismatch_copies"),
    "detect_unfused_reshapes": _detector("detect_unfused_reshapes"),
    "detect_unnecessary_convert_reduce": _detector("detect_unnecessary_convert_reduce"),
    "list_hlo_modules": _xprof_tool("xprof.cli.internal.oss.hlo_tools", "list_hlo_modules"),
    "get_memory_profile": _device_memory_profile,
    "get_peak_allocations": _xprof_tool("xprof.cli.tools.get_peak_allocations_tool", "get_peak_allocations"),
}
assert tuple(TOOLS) == MANAGED_TOOLS
# Tools whose answer neither the report, the analyst nor the investigation reads, and whose conversion reads the
# whole profile again (the utilization viewer: 26x the file on a TPU): not converted by the analysis, but where a
# user opens them.
ON_OPEN = {"get_utilization_viewer": "nothing in the report reads it: the XProf viewer converts it when you open "
                                     "the session's utilization viewer"}
# Tools that only present one converter: when its input is absent there is nothing to run.
_ONLY_CONVERTER = {"get_memory_profile": "memory_profile", "get_utilization_viewer": "utilization_viewer"}
# The conversion of the profile each tool needs (op_stats: the first op_stats converter builds it), and what
# the report lacks when it cannot run. The HLO tools read the dumped modules, which are always made.
NEEDS: dict[str, tuple[str, str]] = {
    "get_xprof_overview": ("op_stats", "no XProf overview: its step-time breakdown and bottleneck are not in the "
                                       "evidence"),
    "get_step_trace": ("op_stats", "no XProf step trace: step times come from the raw events alone"),
    "get_kpi_metrics": ("op_stats", "no XProf KPIs (FLOP rate and memory bandwidth utilisation)"),
    "get_device_information": ("op_stats", "no device model: the roofline has no peak FLOP rate or bandwidth"),
    "get_utilization_viewer": ("utilization_viewer", "no hardware utilisation counters"),
    "get_smart_suggestions": ("smart_suggestion", "no XProf suggestions"),
    "get_roofline_model": ("op_stats", "no roofline: no finding on compute or memory-bound ops"),
    "get_hlo_op_profile": ("op_stats", "no XProf op profile: op times come from the raw events alone"),
    "get_memory_profile": ("memory_profile", "no allocator memory profile: no memory capacity or peak findings"),
}


def _skip_reason(name: str, context: ToolContext) -> str:
    """Why tool ``name`` cannot run in this analysis (too large for XProf, or for the memory ceiling), or ""."""
    if name not in NEEDS:
        return ""
    converter, without = NEEDS[name]
    largest = context.state.largest_file_bytes
    if converter in OP_STATS_CONVERTERS or converter == "op_stats":
        if context.state.slicing_plan(context.budget)[0]:
            return ""
    elif largest <= PROTOBUF_LIMIT and context.budget.fits(CONVERTER_COST[converter] * context.profile_bytes):
        return ""
    if largest > PROTOBUF_LIMIT:
        return f"skipped: {_over_protobuf_limit(largest)}; {without}"
    needed = CONVERTER_COST[converter] * context.profile_bytes
    return f"skipped: {beyond_ceiling(needed, context.budget.ceiling)}; {without}"


# Answers that parse but carry nothing (XProf fills them with zeros, -1 or empty lists), and what that means.
_EMPTY_WHEN: dict[str, tuple[Callable[[dict[str, Any]], bool], str]] = {
    "get_device_information": (lambda data: not data.get("device_type") and not data.get("peak_flop_rate"),
                               "XProf has no device model for this hardware"),
    "get_smart_suggestions": (lambda data: not data.get("suggestions"), "XProf made no suggestions"),
    "get_memory_profile": (lambda data: data.get("peak_memory_usage_gib", -1) < 0, "no memory profile"),
}


def _decoded(payload: Any) -> Any:
    if isinstance(payload, bytes):
        payload = payload.decode("utf-8", errors="replace")
    if isinstance(payload, str):
        try:
            return json.loads(payload)
        except ValueError:
            return payload
    return payload


def _no_data_reason(name: str, data: Any) -> str:
    """Why a tool's answer carries nothing, or "" when it does."""
    if data is None or data in ("", [], {}):
        return "empty result"
    if isinstance(data, dict):
        if str(data.get("status", "")).upper() in _NO_DATA_STATUSES:
            return str(data.get("message") or data.get("error") or data.get("reason") or data["status"])
        is_empty, meaning = _EMPTY_WHEN.get(name, (lambda _: False, ""))
        if is_empty(data):
            return meaning
    return ""


# What a tool built from time slices may say differently from the whole file's conversion, unless the cuts fell
# at the device's step starts (:mod:`mldiag.analysis.xprof.op_stats_merge`): XProf drops the first and last step
# of each slice whose steps its host's events mark.
SLICED_DIFFERENCES = {
    "get_step_trace": "the steps beside each cut are left out of the step count and step times",
    "get_xprof_overview": "the steps beside each cut are left out of the step-time breakdown",
    "get_kpi_metrics": "the steps beside each cut are left out of the step time",
}


def _note(name: str, context: ToolContext) -> str:
    """How the tool's result was made, where XProf's own way was not followed, and what that may change."""
    sliced = context.state.sliced
    if not sliced or NEEDS.get(name, ("",))[0] not in ("op_stats", "smart_suggestion"):
        return ""
    if name in SLICED_DIFFERENCES and not sliced.steps_whole:
        return f"{sliced.note}; {SLICED_DIFFERENCES[name]}"
    return sliced.note


def run_tool(name: str, context: ToolContext) -> ToolResult:
    """Run one managed tool; a tool that fails or finds nothing never raises."""
    from mldiag.analysis.evidence import ToolResult, ToolStatus

    started = time.perf_counter()
    absent = context.state.absent.reason(_ONLY_CONVERTER.get(name, ""))
    if absent:
        return ToolResult(name=name, status=ToolStatus.NO_DATA, seconds=0.0, reason=absent)
    if name in ON_OPEN:
        return ToolResult(name=name, status=ToolStatus.ON_OPEN, seconds=0.0, reason=ON_OPEN[name])
    skipped = _skip_reason(name, context)
    if skipped:
        return ToolResult(name=name, status=ToolStatus.SKIPPED, seconds=0.0, reason=skipped)
    try:
        data = _decoded(TOOLS[name](context))
    except (OverBudget, Skipped) as reason:
        return ToolResult(name=name, status=ToolStatus.SKIPPED, seconds=time.perf_counter() - started,
                          reason=f"skipped: {reason}")
    except FileNotFoundError as reason:  # XProf's way of saying "nothing of that kind in this profile"
        return ToolResult(name=name, status=ToolStatus.NO_DATA, seconds=time.perf_counter() - started,
                          reason=context.private_paths_hidden(str(reason)), note=_note(name, context))
    except Exception as error:  # noqa: BLE001 - one tool's failure is recorded, never fatal
        return ToolResult(name=name, status=ToolStatus.ERROR, seconds=time.perf_counter() - started,
                          reason=context.private_paths_hidden(f"{type(error).__name__}: {error}"))
    seconds = time.perf_counter() - started
    note = _note(name, context)
    if isinstance(data, dict) and str(data.get("status", "")).upper() == "ERROR":
        return ToolResult(name=name, status=ToolStatus.ERROR, seconds=seconds, data=data,
                          reason=str(data.get("error") or data.get("message") or "error"))
    reason = _no_data_reason(name, data)
    status = ToolStatus.NO_DATA if reason else ToolStatus.OK
    return ToolResult(name=name, status=status, seconds=seconds, data=data, reason=reason, note=note)
