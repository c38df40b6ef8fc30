"""One analysis of one profiling session, start to finish.

1. Copy the session's ``<host>.xplane.pb`` files into a private scratch folder
   (XProf writes cache files next to what it converts), and refuse them where
   their planes, lines and metadata alone cost more than the memory ceiling.
2. Within the memory budget (the analysis's memory ceiling less what its own
   process holds: :mod:`mldiag.analysis.xprof.budget`), in this order when memory
   is short and all at once when it is not: have XProf build its op_stats (the
   heavy conversion most tools read; from time slices of the file where the
   whole file's conversion cannot fit under the ceiling, skipped where even
   slices cannot), dump the HLO modules (small: the profile's metadata
   plane), and read each host's raw events in a process of its own (which
   proves the file is a profile and saves every event for the follow-ups).
   The raw-event read queues last so that it overlaps the tools' own work on
   op_stats rather than delaying the conversion.
3. Once the HLO modules are dumped, run the 15 tools in parallel, each in a
   thread of its own; conversions are shared between them and the heavy ones
   queue on the budget, so the tools that read only the HLO modules run while
   op_stats is built. The two tools whose input the raw events can show absent
   wait for the read.
4. Hand the evidence to the deterministic analyst.

:func:`start_analysis` does steps 1 and 2 and hands back a
:class:`RunningAnalysis`, whose :meth:`~RunningAnalysis.finish` does the rest;
:func:`analyze_profile` is both in one call. The conversions start before the
analysis loads anything it needs only later (pydantic models, the analyst): on
a large profile they are most of the time, and everything else loads beside
them. A caller with its own preparation to do (the CLI loads its settings and
the investigation) does it between the two calls, for the same reason.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mldiag import __version__
from mldiag.analysis.profile.profiles import UNREADABLE_EXIT, Session, UnreadableProfile, copy_session, host_of
from mldiag.analysis.profile.wire import Structure, structure_of
from mldiag.analysis.stopping import PRIVATE_FOLDER_PREFIX
from mldiag.analysis.xprof.budget import MemoryBudget, default_ceiling, gib, in_memory_filesystem
from mldiag.analysis.xprof.xprof_tools import (
    CAN_BE_ABSENT,
    MANAGED_TOOLS,
    SMART_SUGGESTION_EVENTS,
    SMART_SUGGESTION_REREADS,
    SessionState,
    ToolContext,
    preload_tools,
    run_tool,
    shared_converters,
)

if TYPE_CHECKING:
    from mldiag.analysis.evidence import Analysis, ToolResult
    from mldiag.analysis.fanout import HostAnalysis
    from mldiag.analysis.host_evidence import HostEvidence

Progress = Callable[[str], None]
# Runs after the analyst, while the private copy and XProf's conversions of it are still there.
Investigate = Callable[["Analysis", ToolContext], "Analysis"]
TIMELINE_SUFFIX = ".timeline.npz"
# The reader process's peak by the file's events and bytes, where cutting it into time slices has counted the
# events: its interpreter and modules, bytes per event (the evidence's arrays) and per byte of the file (a line's
# copy and its framing while it is read). Measured peaks: 222.6 MiB for 1.93 million events in 44.4 MB (op by op),
# 158.4 MiB for 0.79 million in 44.1 MB (a training loop), 741.6 MiB for 5.5 million in 307 MB; this reserves
# 10-13 % more.
RAW_EVENTS_BASE = 64 << 20
RAW_EVENTS_PER_EVENT = 64
RAW_EVENTS_PER_BYTE = 1.5
# And, where the programs run on devices, per event of the host's threads: the attribution cuts a thread's events
# into pieces of time, up to 2.6 an event on a thread that does not step (tpu_v5e/worker_process_loader: 612,000
# pieces of 233,000 events, 129.4-129.5 MiB for 3.8 MB, 9 % under what this reserves), and which thread steps is
# known only once the events are read.
RAW_EVENTS_PER_HOST_THREAD_EVENT = 260
# Where the events are not counted (a file small enough to convert whole), its interpreter and modules and this
# much per byte of the file: the most a fixture's read takes, a TPU host whose 26 threads' Python the attribution
# sweeps (tpu_v5e/worker_process_loader: 129.4-129.5 MiB for 3.8 MB, 233,000 events), with 12 % to spare. A small
# file's read costs its interpreter first, whatever its size.
RAW_EVENTS_PER_UNCOUNTED_BYTE = 22
DETECTORS = ("detect_layout_mismatch_copies", "detect_unfused_reshapes", "detect_unnecessary_convert_reduce")


@contextlib.contextmanager
def _private_folder(scratch_dir: Path | None) -> Iterator[Path]:
    if scratch_dir is not None:
        Path(scratch_dir).mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=PRIVATE_FOLDER_PREFIX, dir=scratch_dir))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def raw_events_cost(events: int, file_bytes: int, host_thread_events: int = 0) -> int:
    """What the raw-event read of a file needs at its peak, its process included: by the file's events, those on
    its host's threads where its programs run on devices, and its bytes where its events are counted (0: not
    counted), else by its bytes alone."""
    if not events:
        return RAW_EVENTS_BASE + RAW_EVENTS_PER_UNCOUNTED_BYTE * file_bytes
    return (RAW_EVENTS_BASE + RAW_EVENTS_PER_EVENT * events + RAW_EVENTS_PER_HOST_THREAD_EVENT * host_thread_events
            + int(RAW_EVENTS_PER_BYTE * file_bytes))


def _sliced_file_read_cost(state: SessionState) -> int:
    """What the raw-event read of a session's one host file reserves, once cutting it has counted its events."""
    return raw_events_cost(state.events, state.largest_file_bytes, state.host_thread_events)


def timeline_of(xplane: Path) -> Path:
    """Where the raw-event read of ``xplane`` saves its every event (beside it, in the private copy)."""
    return xplane.with_name(host_of(xplane) + TIMELINE_SUFFIX)


def read_events_apart(xplane: Path) -> HostEvidence:
    """The raw-event evidence of one file, read in a process of its own, which also saves its timeline.

    Reading is Python-bound (so processes run hosts in parallel where threads
    would not) and leaves fragmented memory behind; a child takes both away.
    """
    done = subprocess.run([sys.executable, "-m", "mldiag.analysis.loop.raw_events", str(xplane), str(timeline_of(xplane))],
                          capture_output=True, text=True)
    if done.returncode == UNREADABLE_EXIT:
        raise UnreadableProfile(done.stderr.strip())
    if done.returncode != 0:
        raise RuntimeError(f"reading {xplane.name} failed (exit {done.returncode}): {done.stderr.strip()[-500:]}")
    from pydantic import TypeAdapter

    from mldiag.analysis.host_evidence import HostEvidence

    return TypeAdapter(HostEvidence).validate_json(done.stdout)


def _require_structure_within(files: Sequence[Path], ceiling_bytes: int) -> None:
    """Raise :class:`UnreadableProfile` where the structure of ``files`` (their planes, lines and metadata,
    whatever their events) would cost more than ``ceiling_bytes`` to read: XProf converts in this process,
    so such a file must not reach it."""
    counted = Structure()
    for path in files:
        counted += structure_of(path, beyond=ceiling_bytes - counted.cost)
        if counted.cost > ceiling_bytes:
            raise UnreadableProfile(f"{path.name} holds at least {counted}: reading them needs more than "
                                    f"the memory ceiling ({gib(ceiling_bytes)})")


def _shared_bytes(files: Sequence[Path]) -> int:
    """What every time slice of a one-file session would carry (0 for a file the raw-event read will refuse)."""
    from mldiag.analysis.profile.slices import shared_bytes
    from mldiag.analysis.profile.wire import MalformedXSpace

    if len(files) != 1:
        return 0
    try:
        return shared_bytes(files[0])
    except MalformedXSpace:
        return 0


def _absent_inputs(hosts: list[HostEvidence], timelines: Sequence[Path]) -> dict[str, str]:
    """Converters whose input the raw events (and the timelines they saved) show is not in the profile."""
    from mldiag.analysis.host_evidence import DeviceKind
    from mldiag.analysis.profile.timeline import Timeline

    absent = {}
    if not any(host.memory_allocator_events for host in hosts):
        absent["memory_profile"] = "the trace has no memory allocator events"
    if not any(host.device_kind is DeviceKind.TPU for host in hosts):
        absent["utilization_viewer"] = "hardware utilization counters are recorded on TPUs only"
    names = (name for path in timelines for name in Timeline.saved_names(path))
    if "memory_profile" in absent and not any(marker in name for name in names for marker in SMART_SUGGESTION_EVENTS):
        absent[SMART_SUGGESTION_REREADS] = "no allocator events, nor events of the steps' shares it measures"
    return absent


class _HloModules:
    """The session's HLO modules, parsed once for the three detectors."""

    def __init__(self, client: object, folder: Path):
        self._client, self._folder = client, folder
        self._lock = threading.Lock()
        self._modules: list | None = None

    def __call__(self) -> list:
        from mldiag.analysis.xprof import hlo

        with self._lock:
            if self._modules is None:
                names = [p.name.removesuffix(".hlo_proto.pb") for p in self._folder.glob("*.hlo_proto.pb")]
                self._modules = hlo.load_modules(names, self._text)
            return self._modules

    def _text(self, module: str) -> str:
        _, data = self._client.fetch(
            tool_name="graph_viewer", session_id=str(self._folder),
            graph_viewer_options={"type": "long_txt", "module_name": module},
        )
        return data.decode("utf-8", errors="replace") if isinstance(data, bytes) else str(data)


def _hlo_programs(context: ToolContext) -> list:
    """Each HLO program's parameters, results and largest intermediate; none when the modules cannot be read."""
    from mldiag.analysis.xprof import hlo

    try:
        return hlo.program_buffers(context.hlo())
    except Exception:  # noqa: BLE001 - the detectors already recorded why the modules are unreadable
        return []


def _hlo_kernels(context: ToolContext) -> tuple[list, dict[str, str]]:
    """What each kernel of the HLO programs computes, and the detectors that failed on a program (what -> why);
    no kernels when the modules cannot be read (the tools that read them record why)."""
    from mldiag.analysis.xprof import hlo

    try:
        modules = context.hlo()
    except Exception:  # noqa: BLE001 - the detectors already recorded why the modules are unreadable
        return [], {}
    failures: dict[str, str] = {}
    return hlo.kernel_work(modules, failures), failures


@dataclass(frozen=True)
class RunningAnalysis:
    """An analysis whose conversions are under way; :meth:`finish` completes it (see :func:`start_analysis`)."""

    started: float
    say: Progress
    origin: Path  # the folder the user named
    session: Session  # the private copy
    pool: ThreadPoolExecutor
    state: SessionState
    context: ToolContext
    dumping: Future
    reading: list[Future]

    def finish(self, *, source: str = "", investigate: Investigate | None = None) -> Analysis:
        """Run the 15 tools, assess the evidence and, given ``investigate``, follow up on the findings.

        Raises :class:`~mldiag.analysis.profile.profiles.UnreadableProfile` for a file
        that is empty, truncated or not a profile.
        """
        from mldiag.analysis.evidence import HloIssue, ProfileInput
        from mldiag.analysis.rules import analyst

        state, context, say, session = self.state, self.context, self.say, self.session
        try:
            self.dumping.result()
        except Exception:
            for future in self.reading:  # a file that is not a profile is the better reason
                future.result()
            raise
        running = [self.pool.submit(run_tool, name, context) for name in MANAGED_TOOLS]
        try:
            hosts = [future.result() for future in self.reading]
        except BaseException:
            state.absent.settle(dict.fromkeys(CAN_BE_ABSENT, "the raw events could not be read"))
            raise
        state.absent.settle(_absent_inputs(hosts, context.timelines))
        results: dict[str, ToolResult] = {}
        for future in as_completed(running):
            result = future.result()
            results[result.name] = result
            say(f"{result.name}: {result.status.value} ({result.seconds:.1f} s)")
        tools = [results[name] for name in MANAGED_TOOLS]

        hlo_issues = {
            result.name: [HloIssue.model_validate(issue) for issue in result.data or []]
            for result in tools if result.name in DETECTORS
        }
        kernels, failures = _hlo_kernels(context)
        analysis = analyst.assess(
            hosts=hosts,
            tools=tools,
            hlo_issues=hlo_issues,
            hlo_programs=_hlo_programs(context),
            hlo_kernels=kernels,
            missing_evidence={f"kernel detector {what}": why for what, why in failures.items()},
            profile=ProfileInput(
                source=source or str(self.origin), session=session.name,
                files=[f.name for f in session.files], bytes=state.profile_bytes,
            ),
            versions={"mldiag": __version__, "xprof": importlib.metadata.version("xprof")},
            seconds=time.perf_counter() - self.started,
        )
        if investigate is not None:
            analysis = investigate(analysis, context)
            analysis.seconds = time.perf_counter() - self.started
        return analysis

    def follow_up(self, analysis: Analysis, investigate: Investigate) -> Analysis:
        """Investigate ``analysis``, made elsewhere (the merge of a session this file is one host of), with the
        follow-up tools on this file, once its HLO modules are dumped and its raw events read."""
        self.dumping.result()
        self.state.absent.settle(_absent_inputs([future.result() for future in self.reading], self.context.timelines))
        return investigate(analysis, self.context)


@contextlib.contextmanager
def start_analysis(
    paths: Sequence[Path],
    scratch_dir: Path | None = None,
    *,
    progress: Progress | None = None,
    memory_ceiling_bytes: int | None = None,
    owned_inputs: bool = False,
) -> Iterator[RunningAnalysis]:
    """Start analysing the profile files of one session (one per host); XProf's conversions begin at once.

    ``scratch_dir`` is where the private copy lives while the analysis runs
    (a temporary folder when omitted); nothing is written anywhere else.
    ``owned_inputs``: the files were downloaded for this analysis and nothing
    else writes them, so the copy may be a link to them.
    ``memory_ceiling_bytes`` bounds the analysis's memory (by default
    :func:`~mldiag.analysis.xprof.budget.default_ceiling` of the profile's size, so that a profile of more
    than a few MB has XProf's op_stats built from time slices): an XProf tool whose conversion would not
    fit under it is skipped, with what it needs.
    Leaving the block waits for every step that started, then removes the copy.
    """
    started = time.perf_counter()
    say = progress or (lambda message: None)
    files = [Path(p) for p in paths]
    if not files:
        raise UnreadableProfile("no profile files to analyse")
    # A thread per tool and per step below: most of them wait (on a conversion, on the budget), none spins.
    with _private_folder(scratch_dir) as scratch, ThreadPoolExecutor(
        max_workers=len(MANAGED_TOOLS) + 3, thread_name_prefix="mldiag-analysis"
    ) as pool, ThreadPoolExecutor(max_workers=len(files), thread_name_prefix="mldiag-raw-events") as readers:
        session = copy_session(Session(files[0].parent.name, tuple(files)), scratch, owned=owned_inputs)
        profile_bytes = session.bytes
        # In an in-memory filesystem the profile is held once (a linked copy and its download are the same bytes)
        # and its time slices, written beside it, about as much again.
        budget = MemoryBudget.under_ceiling(memory_ceiling_bytes, profile_bytes=profile_bytes,
                                            held_in_files=2 * profile_bytes if in_memory_filesystem(scratch) else 0)
        # Refused only past what the machine has: under the profile's own ceiling, slices or a skip answer it.
        _require_structure_within(session.files, memory_ceiling_bytes or default_ceiling() or budget.ceiling)
        folder = session.files[0].parent
        client = shared_converters()
        state = SessionState(files=[str(f) for f in session.files], budget=budget, profile_bytes=profile_bytes,
                             largest_file_bytes=max(f.stat().st_size for f in session.files),
                             shared_bytes=_shared_bytes(session.files), read_cost=_sliced_file_read_cost)

        def read(xplane: Path) -> HostEvidence:
            # Behind op_stats in the budget's line: when both cannot run at once, the conversions (on every core)
            # go first and the read (on one) overlaps the tools' work on their op_stats. Time slices' conversions
            # let it in behind the first of their processes where it fits beside it.
            try:
                state.op_stats_conversions_queued.wait()
                cost = raw_events_cost(state.events, xplane.stat().st_size, state.host_thread_events)
                with budget.reserve_all_needed(cost, queued=state.read_queued.set):
                    say(f"reading the events of {xplane.name} ({xplane.stat().st_size / 1e6:.1f} MB)")
                    return read_events_apart(xplane)
            finally:  # whatever happened, no conversion waits for the read to queue any more
                state.read_queued.set()

        # Leaving the pools waits for every step they started, so nothing runs once the copy is removed.
        with client.session(folder, state):
            pool.submit(client.build_op_stats, str(folder))
            state.op_stats_queued.wait()
            pool.submit(preload_tools)
            dumping = pool.submit(client.dump_hlo, str(folder))
            state.hlo_queued.wait()  # before the caller goes on: the session must stay registered until then
            reading = [readers.submit(read, xplane) for xplane in session.files]
            context = ToolContext(
                folder=folder, client=client, hlo=_HloModules(client, folder), budget=budget,
                profile_bytes=profile_bytes, timelines=tuple(timeline_of(f) for f in sorted(session.files, key=str)),
                state=state,
            )
            yield RunningAnalysis(started=started, say=say, origin=files[0].parent, session=session, pool=pool,
                                  state=state, context=context, dumping=dumping, reading=reading)


def analyze_profile(
    paths: Sequence[Path],
    scratch_dir: Path | None = None,
    *,
    source: str = "",
    progress: Progress | None = None,
    memory_ceiling_bytes: int | None = None,
    investigate: Investigate | None = None,
    owned_inputs: bool = False,
) -> Analysis:
    """Analyse the profile files of one session (one per host): :func:`start_analysis`, then finish.

    ``scratch_dir`` is where the private copy lives while the analysis runs
    (a temporary folder when omitted); nothing is written anywhere else.
    Raises :class:`~mldiag.analysis.profile.profiles.UnreadableProfile` for a file that
    is empty, truncated or not a profile. ``investigate`` follows up on the
    analyst's findings with more XProf tools before the private copy is removed.
    """
    with start_analysis(paths, scratch_dir, progress=progress, memory_ceiling_bytes=memory_ceiling_bytes,
                        owned_inputs=owned_inputs) as running:
        return running.finish(source=source, investigate=investigate)


def analyze_host(
    path: Path,
    scratch_dir: Path | None = None,
    *,
    progress: Progress | None = None,
    memory_ceiling_bytes: int | None = None,
    owned_inputs: bool = False,
) -> HostAnalysis:
    """Analyse one host file of a multi-host session on its own; its evidence is kept for the session's merge
    (:func:`mldiag.analysis.fanout.merge_hosts`). Raises
    :class:`~mldiag.analysis.profile.profiles.UnreadableProfile` as :func:`analyze_profile` does."""
    from mldiag.analysis.fanout import HostAnalysis

    with start_analysis([path], scratch_dir, progress=progress, memory_ceiling_bytes=memory_ceiling_bytes,
                        owned_inputs=owned_inputs) as running:
        alone = running.finish()
        return HostAnalysis.of(alone, hlo_kernels=_hlo_kernels(running.context)[0])
