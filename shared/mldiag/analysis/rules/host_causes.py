"""Why the devices wait for the host: the host-side causes of idle time, each with what it costs.

The host keeps the devices waiting for different reasons, and each has its own
fix: the training thread makes the batches itself, saves checkpoints
synchronously, reads device values back every step to log them, formats and
writes log records itself, draws the step's random numbers with numpy, waits on
a loader thread that is slower than the step, waits for the Python interpreter
while another thread runs Python, or copies data between host and device
memory. A cause is told from the names the trace gives the work (the
function that owns the time, its thread, the copies it makes) and costs the
time the devices idle because of it, per iteration of the loop.

With the loop's attribution (:class:`~mldiag.analysis.host_evidence.Attribution`)
the costs are its parts; without it, the raw events' own measures: each host
function's own idle time, the stepping thread's waits on other threads, and its
copies between host and device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from enum import StrEnum

from mldiag.analysis.host_evidence import HostActivity, HostEvidence, TimeCause
from mldiag.analysis.loop.attribution import CONSUMER_ROLE, SAVER_ROLE
from mldiag.analysis.profile.trace_names import SAVING, transfer_direction


class HostCause(StrEnum):
    BATCH_MAKING = "batch_making"  # the training thread makes or loads its batches
    CHECKPOINT = "checkpoint"  # the training thread saves the state
    DEVICE_SYNC = "device_sync"  # the training thread reads device values back (to log them) every step
    LOGGING = "logging"  # the training thread formats and writes logs itself, from values already on the host
    PRODUCER_THREAD = "producer_thread"  # the training thread waits on a slower thread that produces its input
    CONSUMER_THREAD = "consumer_thread"  # the training thread waits to hand its output to a slower thread
    INTERPRETER_LOCK = "interpreter_lock"  # the training thread waits for the interpreter another thread's Python holds
    TRANSFERS = "transfers"  # copies between host and device memory
    ROUND_TRIP = "round_trip"  # the training thread computes on device values it copied back (and copies the result in)
    HOST_RANDOM = "host_random"  # the training thread draws random numbers (masks, noise) for the step on the host
    UNTRACED = "untraced"  # the training thread's time that no event records: its own Python code, or a wait
    HOST_WORK = "host_work"  # host work none of the above names


# Title words (fixed, no names from the profile) and what each cause is.
WORDS = {
    HostCause.BATCH_MAKING: ("the training thread makes its input",
                             "The thread that runs the steps also loads and prepares the batches (reading, "
                             "decoding, augmenting, converting with numpy), so the devices wait while it does."),
    HostCause.CHECKPOINT: ("the training thread saves a checkpoint",
                           "The thread that runs the steps saves checkpoints itself and the steps stop until the "
                           "state is copied off the device and written."),
    HostCause.DEVICE_SYNC: ("the host syncs with the device every step",
                            "Every step the host reads a value back from the device (float(loss), .item(), "
                            "np.asarray, block_until_ready), which waits for the step to finish, and then formats "
                            "and writes it while the devices wait for the next step's launch."),
    HostCause.LOGGING: ("the training thread formats and writes logs",
                        "The thread that runs the steps turns values into log records (formatting, encoding, "
                        "writing to a file or a logger) itself, between the steps' launches, while the devices "
                        "wait."),
    HostCause.PRODUCER_THREAD: ("the training thread waits on a slower loader thread",
                                "The thread that runs the steps waits for its input from another host thread that "
                                "cannot keep up: the devices idle while that thread reads and prepares the batch."),
    HostCause.CONSUMER_THREAD: ("the training thread waits to hand its output to a slower thread",
                                "The thread that runs the steps hands each step's output (metrics, records, "
                                "predictions) to another host thread through a bounded queue, and that thread takes "
                                "longer per item than a step: the training thread blocks on the hand-over while the "
                                "devices idle."),
    HostCause.INTERPRETER_LOCK: ("another thread's Python holds the interpreter",
                                 "Another host thread runs Python code of its own (its functions' own work, not "
                                 "numpy, I/O or sleeps, which let go of the interpreter) while the training thread "
                                 "needs the interpreter to launch the next step and take its result: CPython runs "
                                 "one thread's Python at a time, so the training thread waits its turn (up to the "
                                 "5 ms switch interval each time) while the devices idle."),
    HostCause.TRANSFERS: ("data is copied between host and device memory",
                          "Data goes from the device to the host and back (or is copied to the device again every "
                          "step) and the devices wait for the copies."),
    HostCause.ROUND_TRIP: ("the host computes on values copied off the device",
                           "Every step the host copies values off the device and computes on them with numpy or "
                           "Python (and copies the result back to the device, where it goes on); the devices wait "
                           "for all of it."),
    HostCause.HOST_RANDOM: ("the training thread draws random numbers for the step",
                            "The thread that runs the steps draws the step's random numbers (dropout masks, noise, "
                            "random choices) on the host, and they are copied to the device every step, while the "
                            "devices wait: the device can draw them itself, inside the step, in a fraction of the "
                            "time."),
    HostCause.UNTRACED: ("the training thread runs untraced",
                         "The thread that runs the steps spends this time with no event in the trace: its own Python "
                         "code (loading, decoding or tokenising the next batch, padding it with Python or numpy), or "
                         "a wait the trace does not show (a loader thread's queue, a copy, a sleep, I/O)."),
    HostCause.HOST_WORK: ("waiting for the host",
                          "Much of each iteration goes to host-side work (loading, decoding or transferring the "
                          "next batch, or other Python work) while the devices wait."),
}

PART_SHARE = 0.05  # work that holds less of its cause's time is not named with it
# A read of device values back in (nearly) every step serialises the host's work with the device's: it is the
# cause when the device computes at least this share of the training thread's costliest work per step, so that
# syncing every N steps would let the two overlap and save most of that work's cost.
OVERLAP_SHARE = 0.75
# Host work on values copied off the device, as a share of the training thread's copies both ways, at which the
# copies are the round trip's (computing on the device removes both), not a cause of their own.
ROUND_TRIP_WORK = 0.25
# Host work per step after a read of device values, over the devices' compute per step, at which it is computing
# on those values rather than waiting for them.
COMPUTING_READS = 2.0
# Host work per step over the devices' compute per step from which running it ahead of the step (a pipeline, a
# background thread) hides too little of it: the loop stays host-bound unless the work itself gets cheaper.
OUTPACES = 2.0
EVERY_STEP = 0.9  # calls per step of a function that reads device values back, to sync every step
WAITED_ON_SHARE = 0.02  # share of the loop another thread's function holds while the training thread waits on it
_SYNC = re.compile(r"\blog|_log|log_|logging|logger|\bemit|print|metric|summar|wandb|tensorboard|scalar|"
                   r"progress|tqdm|\bwrite", re.IGNORECASE)
_INPUT = re.compile(r"batch|data|load|input|augment|decode|read|preprocess|sampler|shuffle|collate|next|"
                    r"iter(?!ation)|fetch|tokeni|prefetch|feed|^Iterator::|tf_data", re.IGNORECASE)
# Random numbers drawn for the step, as the function that draws them is named: the step's randomness, not its data.
_RANDOM = re.compile(r"random|rng|noise|dropout|bernoulli|gumbel", re.IGNORECASE)
_FUNCTION = re.compile(r"^\$\S+:\d+ (.+)$")


def function_name(name: str) -> str:
    """A Python-tracer frame's function (``$train.py:12 make_batch`` -> ``make_batch``); other names as they are."""
    match = _FUNCTION.match(name)
    return match.group(1) if match else name


def kind_of(name: str, reads_device: bool, round_trip: bool = False) -> HostCause:
    """The cause a function or scope of the training thread stands for, from its name, what it calls, and whether
    the thread copies device values back and other values in every step (``round_trip``): then work no name
    explains is computation on those values."""
    function = function_name(name)
    if SAVING.search(name):  # the function, or the module it is in (orbax's, a checkpoint helper's)
        return HostCause.CHECKPOINT
    if _SYNC.search(function):
        return HostCause.DEVICE_SYNC if reads_device else HostCause.LOGGING
    if _INPUT.search(function):
        return HostCause.BATCH_MAKING
    if _RANDOM.search(function):
        return HostCause.HOST_RANDOM
    # Its own time is computation; a read of device values is only where that computation starts.
    if round_trip:
        return HostCause.ROUND_TRIP
    return HostCause.DEVICE_SYNC if reads_device else HostCause.HOST_WORK


# Calls into Python's runtime or standard library whose cost on the training thread has a fix of its own, as the
# Python tracer names them ("$gc collect"): the fix for the call, whatever the framework.
_KNOWN_CALLS = (
    (re.compile(r"^\$gc collect$"),
     "A full garbage collection runs on the training thread: remove the gc.collect() call from the loop (or run it "
     "every few hundred steps), call gc.freeze() once after setup so that the long-lived objects (datasets, "
     "vocabularies, caches) are not traversed again, and raise gc.set_threshold if automatic collections still show "
     "up in the steps."),
    (re.compile(r"^\$time sleep$"),
     "The training thread sleeps: remove the time.sleep from the loop, or move what it paces (polling, rate "
     "limiting) to another thread."),
)


def known_call_fix(name: str) -> str | None:
    """The fix for a runtime or library call that holds the time, where it has one of its own."""
    return next((fix for pattern, fix in _KNOWN_CALLS if pattern.match(name)), None)


# A child process started and waited for, as the Python tracer names the calls (``$subprocess.py:506 run``,
# ``$os system``), and the waits on a file descriptor a thread blocks in meanwhile (``$selectors.py:402 select``).
_SUBPROCESS = re.compile(r"^\$(subprocess\.py:\d+ |os (system|popen)$|posix (system|waitpid)$)")
_BLOCKED = re.compile(r"^\$(subprocess\.py:\d+ |selectors\.py:\d+ |select (select|poll|epoll)$|os (system|popen|"
                      r"waitpid)$|posix (system|waitpid)$|_socket |socket\.py:\d+ (recv|recv_into|accept)$)")
# Arrays read from files: numpy's .npy/.npz readers (np.load unzips, checks the CRC and reads each array), fromfile,
# and the raw reads of Python's io under them.
_DISK_READ = re.compile(r"^\$((_format_impl|format)\.py:\d+ read_array|(_npyio_impl|npyio)\.py:\d+ load$|zipfile\.py:"
                        r"\d+ |numpy fromfile$|_io\.\w+ read(into|line|lines)?$|io\.py:\d+ read)")
BLOCKED_SHARE = 0.5  # of a cause's time, held in those calls, for the cause to be a wait on another process or a file


def blocked_on(host: HostEvidence, cause: Cause) -> str:
    """What most of a host-work cause's time is the training thread blocked on: "subprocess" (a child process it
    starts and waits for), "descriptor" (a pipe's or socket's output, the caller unseen), "disk" (arrays read from
    files), or "" (none): the calls that hold the time in the loop's activities on the cause's thread."""
    threads = {part.thread for part in cause.parts} - {""}
    held = [(name, ms) for activity in (*host.host_activities, *host.between_steps)
            if not threads or activity.thread in threads for name, ms, _ in _owned(activity)]
    if sum(ms for name, ms in held if _DISK_READ.match(name)) >= BLOCKED_SHARE * cause.ms:
        return "disk"
    if sum(ms for name, ms in held if _BLOCKED.match(name)) < BLOCKED_SHARE * cause.ms:
        return ""
    return "subprocess" if any(_SUBPROCESS.match(name) for name, _ in held) else "descriptor"


_WITHOUT_WAITING = (" Get the figure in-process (os.getloadavg, psutil, a library call instead of a command), make "
                    "the call every N steps, or make it without waiting (subprocess.Popen or the request on a "
                    "background thread, its answer reported at a later step).")
BLOCKED_FIXES = {
    "subprocess": "{who} spends most of its time waiting for a child process it starts (subprocess.run, os.system): "
                  "starting a process and waiting for its output costs tens of milliseconds whatever it runs."
                  + _WITHOUT_WAITING,
    "descriptor": "{who} spends most of its time blocked in select(), waiting for a pipe or socket to answer: the "
                  "output of a child process it starts (subprocess.run with captured output, os.popen) or a "
                  "network call (a metrics or storage service)." + _WITHOUT_WAITING,
    "disk": "{who} spends most of its time reading arrays from files (np.load and the copies it makes). What does "
            "not change between uses (weights, a reference model, a table): load it once before the loop and keep "
            "the device arrays. What must be read again (the next shard or batch): read it ahead, off the training "
            "thread (a background thread, or an input pipeline such as grain with worker processes), and put it on "
            "the device there.",
}


def _reads_back_only(name: str) -> bool:
    """Whether a copies part (its calls joined by `` + ``) only copies from the device to the host."""
    return {transfer_direction(call) for call in name.split(" + ")} == {"device to host"}


def copies_both_ways(names: list[str]) -> bool:
    """Whether copies of these names go both from the device to the host and back."""
    directions = {transfer_direction(name) for name in names}
    return {"device to host", "host to device"} <= directions


def checked_calls(host: HostEvidence) -> list[HostActivity]:
    """The jit calls that read device values back inside the call, in (nearly) every step: a call whose outputs
    are copied to the host and checked as it returns (JAX's debug_nans or debug_infs)."""
    return [call for call in host.dispatched if call.reads_device and call.count_per_step >= EVERY_STEP]


def other_thread_kind(name: str, thread: str = "") -> HostCause:
    """What the training thread waits for when another thread runs ``name``: a save (by its name, or on a thread
    whose functions save), a thread that takes its output (one the trace shows only taking from a queue), or the
    next batch."""
    if SAVING.search(name) or SAVER_ROLE in thread:
        return HostCause.CHECKPOINT
    return HostCause.CONSUMER_THREAD if CONSUMER_ROLE in thread else HostCause.PRODUCER_THREAD


@dataclass
class Cause:
    """One cause and what it costs, with the functions that stand for it (most first)."""

    kind: HostCause
    ms: float  # per iteration of the loop
    parts: list[HostActivity] = field(default_factory=list)  # name, thread and own time (``ms_per_step``); a call
    # that syncs with the device every step (``reads_device``, its calls per step) in its time per step
    steps_per_part: int = 1  # the parts' times cover this many steps: 1 per step, the loop's steps over the loop
    share: float | None = None  # of the loop's wall time, where the attribution measures it
    copies: list[HostActivity] = field(default_factory=list)  # a round trip's own copies, in its cost
    # Another thread's function the training thread waits on, in the time its Python held the interpreter the
    # training thread needed: in the cost, as the loop's milliseconds (``ms_per_step``) and share
    interpreter: list[HostActivity] = field(default_factory=list)


def _owned(activity: HostActivity) -> list[tuple[str, float, bool]]:
    """Who holds an activity's own time: (function, ms per step, reads the device); the activity itself where the
    evidence names no one inside it."""
    if activity.owners:
        return [(owner.name, owner.ms_per_step, owner.reads_device) for owner in activity.owners]
    own = activity.self_ms_per_step if activity.self_ms_per_step is not None else activity.ms_per_step
    return [(activity.name, own, activity.reads_device)]


def _part(name: str, ms: float, thread: str = "", share: float = 0.0) -> HostActivity:
    return HostActivity(name=name, count_per_step=0.0, ms_per_step=ms, share_of_step=share, self_ms_per_step=ms,
                        thread=thread)


def _merged(found: list[tuple[HostCause, HostActivity, bool]], cost: dict[HostCause, float],
            steps_per_part: int = 1) -> list[Cause]:
    """One cause per kind: its parts, and its cost: the parts that are costs themselves, plus ``cost`` (a wait on
    other threads, copies measured as a whole) for those that only say what happened meanwhile."""
    causes: dict[HostCause, Cause] = {}
    for kind, part, costs in found:
        cause = causes.setdefault(kind, Cause(kind, 0.0, steps_per_part=steps_per_part))
        cause.parts.append(part)
        cause.ms += part.ms_per_step / steps_per_part if costs else 0.0
    for kind, ms in cost.items():
        causes.setdefault(kind, Cause(kind, 0.0)).ms += ms
    for cause in causes.values():
        cause.parts.sort(key=lambda part: -part.ms_per_step)
        cause.parts = [part for part in cause.parts if part.ms_per_step >= PART_SHARE * cause.parts[0].ms_per_step]
        if steps_per_part > 1:
            cause.share = sum(part.share_of_step for part in cause.parts)
    return sorted((c for c in causes.values() if c.ms > 0), key=lambda c: -c.ms)


def _reads_device(host: HostEvidence, name: str) -> bool:
    """Whether the function ``name`` reads device values back: in its own time, or in a call it makes every step
    (the step's code calls it and it reads, as the device reads list it)."""
    return any(reads for a in (*host.host_activities, *host.between_steps) for held, _, reads in _owned(a)
               if held == name) or any(read.name == name and read.count_per_step >= EVERY_STEP
                                       for read in host.device_reads)


def _from_attribution(host: HostEvidence) -> list[Cause]:
    """The causes as the loop's attribution costs them: its host work (another thread's: a producer) and copies."""
    attribution = host.attribution
    steps = max(1, attribution.steps)
    stepping = next((a.thread for a in (*host.host_activities, *host.between_steps) if a.thread), "")
    # A read that waits for the device is the wait's in the attribution: the copies' own calls tell the directions.
    round_trip = copies_both_ways([part.name for part in attribution.parts
                                   if part.cause is TimeCause.TRANSFERS and part.thread == stepping]
                                  + [t.name for t in host.transfers if t.thread == stepping])
    logging_read = next((read for read in host.device_reads
                         if read.count_per_step >= EVERY_STEP and _SYNC.search(function_name(read.name))), None)
    checking = {call.name for call in checked_calls(host)}
    # A function another thread runs while the training thread waits on it (a queue's get or put), and whose Python
    # also holds the interpreter, is one cause: the interpreter's share of it goes with its thread's kind (a slower
    # loader's).
    waited_on = {part.name for part in attribution.parts
                 if part.cause is TimeCause.HOST_WORK and stepping and part.thread and part.thread != stepping
                 and part.share >= WAITED_ON_SHARE} if host.thread_wait_ms_per_step > 0 else set()
    found, read_back, held = [], [], []
    for part in attribution.parts:
        if part.cause is TimeCause.TRANSFERS and not part.thread:
            continue  # a device busy with its own copies: the data-movement rule's, with the ops and their bytes
        if part.cause is TimeCause.TRANSFERS and logging_read is not None and part.thread == stepping and (
                _reads_back_only(part.name)):
            read_back.append(part)  # the training thread's copies off the device: its logging's read, every step
            continue
        if part.cause is TimeCause.TRANSFERS or (part.cause is TimeCause.DISPATCH and part.name in checking):
            kind = HostCause.TRANSFERS  # a call that copies its outputs back: its time is the copies' and checks'
        elif part.cause is TimeCause.INTERPRETER and part.name in waited_on:
            held.append((other_thread_kind(part.name, part.thread), part))
            continue
        elif part.cause is TimeCause.INTERPRETER:
            kind = HostCause.INTERPRETER_LOCK
        elif part.cause is not TimeCause.HOST_WORK:
            continue
        elif stepping and part.thread and part.thread != stepping:
            kind = other_thread_kind(part.name, part.thread)
        else:
            kind = kind_of(part.name, _reads_device(host, part.name), round_trip)
        found.append((kind, _part(part.name, part.ms, part.thread, part.share), True))
    merged = _with_its_copies(_merged(found, {}, steps), stepping)
    for kind, part in held:
        cause = next((cause for cause in merged if cause.kind is kind), None)
        if cause is None:
            cause = Cause(kind, 0.0, steps_per_part=steps, share=0.0)
            merged.append(cause)
        cause.ms += part.ms / steps
        cause.share = (cause.share or 0.0) + part.share
        cause.interpreter.append(_part(part.name, part.ms, part.thread, part.share))
    merged.sort(key=lambda cause: -cause.ms)
    if logging_read is not None and read_back:
        merged.append(Cause(HostCause.DEVICE_SYNC, sum(part.ms for part in read_back) / steps,
                            [replace(logging_read, reads_device=True)],
                            share=sum(part.share for part in read_back)))
        merged.sort(key=lambda cause: -cause.ms)
    return merged


def _with_its_copies(merged: list[Cause], stepping: str) -> list[Cause]:
    """A round trip through the host costs its copies too: the training thread's copies join the round trip's
    host work where that work is at least ``ROUND_TRIP_WORK`` of them (else the copies are the cause)."""
    trip = next((cause for cause in merged if cause.kind is HostCause.ROUND_TRIP), None)
    copies = next((cause for cause in merged if cause.kind is HostCause.TRANSFERS), None)
    if trip is None or copies is None:
        return merged
    own = [part for part in copies.parts if part.thread == stepping]
    own_ms = sum(part.ms_per_step for part in own) / copies.steps_per_part
    if not own or trip.ms < ROUND_TRIP_WORK * own_ms:
        return merged
    trip.ms += own_ms
    trip.copies = own
    if trip.share is not None:
        trip.share += sum(part.share_of_step for part in own)
    copies.parts = [part for part in copies.parts if part.thread != stepping]
    copies.ms -= own_ms
    return sorted((c for c in merged if c.ms > 0 and (c.parts or c.kind is not HostCause.TRANSFERS)),
                  key=lambda c: -c.ms)


def untraced(host: HostEvidence, least_share: float) -> Cause | None:
    """The stepping thread's untraced time, where the loop's attribution finds it the largest part that is not
    useful device work and at least ``least_share`` of the loop; per iteration, with its share of the loop."""
    attribution = host.attribution
    if attribution is None:
        return None
    part = next((p for p in attribution.parts if not p.useful), None)
    if part is None or part.cause is not TimeCause.UNTRACED or part.share < least_share:
        return None
    steps = max(1, attribution.steps)
    return Cause(HostCause.UNTRACED, part.ms / steps, [_part(part.name, part.ms, part.thread, part.share)],
                 steps_per_part=steps, share=part.share)


def _from_evidence(host: HostEvidence, notable_ms: float) -> list[Cause]:
    """The causes as the raw events measure them: the training thread's functions by their own time, its waits on
    other threads, and the copies between host and device."""
    found, cost = [], {}
    round_trip = copies_both_ways([t.name for t in host.transfers])
    for activity in (*host.host_activities, *host.between_steps):
        if activity.self_ms_per_step is None:
            continue
        found += [(kind_of(name, reads, round_trip), _part(name, own, activity.thread), True)
                  for name, own, reads in _owned(activity) if own >= PART_SHARE * notable_ms]
    if host.thread_wait_ms_per_step >= notable_ms:
        doing = [a for a in host.while_waiting if a.ms_per_step >= PART_SHARE * host.thread_wait_ms_per_step][:4]
        found += [(other_thread_kind(a.name, a.thread), _part(a.name, a.ms_per_step, a.thread), False) for a in doing]
        # The wait is the cost, shared among what the other threads did meanwhile.
        seen = sum(a.ms_per_step for a in doing)
        for a in doing:
            kind = other_thread_kind(a.name, a.thread)
            cost[kind] = cost.get(kind, 0.0) + host.thread_wait_ms_per_step * a.ms_per_step / seen
    copies = [t for t in host.transfers if (t.self_ms_per_step or 0.0) >= PART_SHARE * notable_ms]
    copying_ms = max(sum(t.self_ms_per_step or 0.0 for t in copies), host.transfer_ms_per_step)
    if copying_ms >= notable_ms:
        found += [(HostCause.TRANSFERS, _part(t.name, t.self_ms_per_step or 0.0, t.thread), False) for t in copies]
        cost[HostCause.TRANSFERS] = copying_ms
    return _merged(found, cost)


def stepping_threads(host: HostEvidence) -> set[str]:
    """The threads the training loop's own activities run on."""
    return {a.thread for a in (*host.host_activities, *host.between_steps)}


def on_other_threads(host: HostEvidence, cause: Cause) -> bool:
    """Whether all of a cause's named work runs on threads other than the training loop's."""
    stepping = stepping_threads(host)
    return bool(cause.parts) and all(part.thread and part.thread not in stepping for part in cause.parts)


def _sync_every_step(host: HostEvidence, found: list[Cause]) -> Cause | None:
    """A function that reads device values back every step, where that is what keeps the costliest host work of
    the training thread from overlapping the device's: it costs what the overlap would hide, the lesser of the
    two per step."""
    attribution = host.attribution
    reads = [r for r in host.device_reads if r.count_per_step >= EVERY_STEP and not SAVING.search(r.name)]
    if attribution is None or not reads or not found:
        return None
    work = found[0]
    stepping = stepping_threads(host)
    if work.kind not in (HostCause.BATCH_MAKING, HostCause.HOST_WORK) or any(
            part.thread not in stepping for part in work.parts):
        return None
    steps = max(1, attribution.steps)
    computing_ms = sum(part.ms for part in attribution.parts if part.useful or part.cause is TimeCause.COLLECTIVES)
    overlap_ms = min(work.ms, computing_ms / steps)
    if overlap_ms < OVERLAP_SHARE * work.ms:
        return None
    sync = reads[0]
    part = HostActivity(name=sync.name, count_per_step=sync.count_per_step, ms_per_step=sync.ms_per_step,
                        share_of_step=sync.share_of_step, thread=sync.thread, reads_device=True)
    return Cause(HostCause.DEVICE_SYNC, overlap_ms, [part, *work.parts], steps_per_part=work.steps_per_part,
                 share=overlap_ms * steps / attribution.loop_ms if attribution.loop_ms > 0 else None)


def device_ms_per_step(host: HostEvidence) -> float:
    """The devices' useful work per step: the attribution's useful parts, else the busy share of the step."""
    attribution = host.attribution
    if attribution is not None:
        return sum(part.ms for part in attribution.parts if part.useful) / max(1, attribution.steps)
    return host.busy_fraction * host.step_ms.mean if host.step_ms else 0.0


def outpaces_device(host: HostEvidence, cause: Cause) -> float:
    """How many times the devices' work per step the training thread's own work for ``cause`` takes, where that is
    at least ``OUTPACES``; 0 otherwise, and for work on other threads or waits."""
    if cause.kind not in (HostCause.BATCH_MAKING, HostCause.HOST_WORK) or not cause.parts:
        return 0.0
    stepping = stepping_threads(host)
    if any(part.thread not in stepping for part in cause.parts):
        return 0.0
    device_ms = device_ms_per_step(host)
    ratio = cause.ms / device_ms if device_ms > 0 else 0.0
    return ratio if ratio >= OUTPACES else 0.0


def _computing_on_reads(host: HostEvidence, found: list[Cause]) -> list[Cause]:
    """A function that reads device values back every step and then works on them longer than the devices compute
    in a step (``COMPUTING_READS`` times) is computing on them, not waiting: syncing less often would hide at most
    the devices' time. It is a trip through the host, unless its name says it logs."""
    device_ms = device_ms_per_step(host)
    return [replace(cause, kind=HostCause.ROUND_TRIP)
            if cause.kind is HostCause.DEVICE_SYNC and cause.parts and cause.ms >= COMPUTING_READS * device_ms
            and not any(_SYNC.search(function_name(part.name)) for part in cause.parts) else cause
            for cause in found]


def causes(host: HostEvidence, notable_ms: float) -> list[Cause]:
    """The host-side causes of the devices' idle time, costliest first, each at least ``notable_ms`` per iteration;
    a sync every step that keeps the costliest from overlapping the devices comes before it.

    From the loop's attribution where the evidence carries one, else from the raw events' own measures.
    """
    found = _from_attribution(host) if host.attribution is not None else _from_evidence(host, notable_ms)
    found = _computing_on_reads(host, [cause for cause in found if cause.ms >= notable_ms])
    sync = _sync_every_step(host, found)
    if sync is not None and sync.ms >= notable_ms:
        found.insert(0, sync)
    return found
