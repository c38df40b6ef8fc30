"""How close each program comes to the chip's limits: achieved FLOP/s and bytes/s, a roofline verdict, and MFU.

A program's FLOPs and bytes come from XProf's op profile (XLA's cost model per
op, with the ops' measured self time, grouped by program) or, where the op
profile has none (CPU profiles, a skipped conversion), from the FLOPs of the
dots and convolutions in its HLO (:func:`mldiag.analysis.xprof.hlo.kernel_work`)
and the device time the trace measured for them. The op profile's bytes are
made HBM traffic, together at least what XProf's roofline model measures in HBM
over the capture (:func:`_in_hbm`). Divided by the measured time they give the
achieved rates, which are held against the chip's peaks
(:mod:`mldiag.analysis.rules.hardware`):

* **compute-bound**: the program's arithmetic intensity is at or above the
  chip's ridge point and it runs at ``NEAR_ROOFLINE`` of the peak FLOP/s or more;
* **memory-bound**: below the ridge point, at ``NEAR_ROOFLINE`` of the HBM
  bandwidth or more (a decode loop streaming its weights: healthy, not a fault);
* **neither**: far from both limits, held back by something other than the
  hardware (latency, small kernels, waits on copies).

Where the op profile's FLOPs for a program run faster than any peak the chip
has (``IMPOSSIBLE`` times its fastest), XLA's cost model has miscounted that
program (seen on TPU programs that copy a large buffer into a new layout): its
figures are set aside, its FLOPs are its HLO's matmuls and its bytes unknown.

Without a known chip (a CPU, a device type no row names) the achieved rates
are reported and no verdict is given. MFU is the step's FLOPs per device over
the step time, as a share of the peak at the dtype of the programs' matmuls.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from mldiag.analysis.evidence import HloProgram, Metrics, ProgramRoofline
from mldiag.analysis.host_evidence import DeviceKind, HostEvidence, OpTime, StepSource
from mldiag.analysis.profile.trace_names import hlo_instruction, program_base
from mldiag.analysis.rules.hardware import GIB, Chip, chip_for, peak_dtype
from mldiag.analysis.xprof.hlo import KernelWork

NEAR_ROOFLINE = 0.5  # achieved share of a peak at which a program is bound by that limit
MIN_PROGRAM_SHARE = 0.01  # programs below this share of the listed device time are not listed
MAX_PROGRAMS = 8
IMPOSSIBLE = 1.2  # achieved FLOP/s over the chip's fastest peak beyond which the cost model miscounted
_HEADLINE_DTYPES = ("bf16", "f16")  # the peak a program without matmuls is held to


@dataclass
class _Costs:
    ms: float = 0.0
    flops: float = 0.0
    bytes: float | None = 0.0
    copy_ms: float = 0.0  # in asynchronous copies (copy-start / copy-done): waits on transfers, not work
    runs: int | None = None  # runs of the program in the capture (over devices), where the source tells
    miscounted: bool = False  # the cost model's FLOPs ran faster than the chip can: set aside for the HLO's


_COPY = re.compile(r"^copy-(start|done)")


def chip_of(hosts: list[HostEvidence], memory_capacity_bytes: int | None,
            device_information: dict[str, Any]) -> Chip | None:
    """The chip the profile ran on, from the device type the raw events or XProf's device information name."""
    if not hosts or any(host.device_kind is DeviceKind.CPU for host in hosts):
        return None
    names = [hosts[0].device_type, str(device_information.get("device_type") or "")]
    return next((chip for name in names if name and (chip := chip_for(name, memory_capacity_bytes))), None)


def _op_profile_costs(op_profile: dict[str, Any]) -> dict[str, _Costs]:
    """Device time, FLOPs and bytes per program, from the op profile's operations grouped by program.

    The op profile lists a few operations per category, with each category's totals: what the listed ones leave
    of a total goes to the programs in proportion to their listed time in that category (all of it to the one
    program of a capture of one).
    """
    costs: dict[str, _Costs] = {}
    totals = {str(c.get("category")): c for c in op_profile.get("category_summary") or [] if isinstance(c, dict)}
    for category, ops in (op_profile.get("grouped_operations") or {}).items():
        listed: dict[str, list[float]] = {}  # program -> [ms, flops, bytes] of its listed operations
        for op in ops if isinstance(ops, list) else []:
            path = str(op.get("name", "")).split("/")
            if len(path) < 3 or path[0] != "by_program":
                continue
            program = costs.setdefault(path[1], _Costs())
            occurrences = int(op.get("occurrences") or 0)
            if occurrences > 0:
                program.runs = occurrences if program.runs is None else min(program.runs, occurrences)
            sums = listed.setdefault(path[1], [0.0, 0.0, 0.0])
            for k, key in enumerate(("total_self_time_ms", "flops", "bytes_accessed")):
                sums[k] += float(op.get(key) or 0.0)
        total = totals.get(category, {})
        listed_ms = sum(sums[0] for sums in listed.values())
        rest = [max(0.0, float(total.get(key) or 0.0) - sum(sums[k] for sums in listed.values()))
                for k, key in enumerate(("total_self_time_ms", "total_flops", "bytes_accessed"))]
        for name, (ms, flops, moved) in listed.items():
            share = ms / listed_ms if listed_ms > 0 else 1.0 / len(listed)
            program = costs[name]
            program.ms += ms + share * rest[0]
            program.copy_ms += ms + share * rest[0] if _COPY.match(category) else 0.0
            program.flops += flops + share * rest[1]
            program.bytes += moved + share * rest[2]
    return costs


def _hbm_share(roofline_model: dict[str, Any]) -> float | None:
    """The share of the op profile's bytes (every memory space: HBM, VMEM, CMEM) that XProf's roofline model
    measures in HBM; None where it does not say."""
    program = roofline_model.get("program") or {}
    try:
        hbm, every_space = float(program["hbm_bw_gibs"]), float(program["measured_memory_bw_gibs"])
    except (KeyError, TypeError, ValueError):
        return None
    return min(1.0, hbm / every_space) if every_space > 0 and hbm >= 0 else None


def _hbm_bytes(roofline_model: dict[str, Any]) -> float | None:
    """The bytes XProf's roofline model measures in HBM over the capture (its HBM bandwidth over its total time);
    None where it does not say."""
    program = roofline_model.get("program") or {}
    try:
        hbm_bytes = float(program["hbm_bw_gibs"]) * GIB * float(program["total_time_ms"]) / 1e3
    except (KeyError, TypeError, ValueError):
        return None
    return hbm_bytes if hbm_bytes > 0 else None


def _in_hbm(costs: dict[str, _Costs], roofline_model: dict[str, Any], buffers: dict[str, HloProgram],
            works: dict[str, list[KernelWork]]) -> None:
    """Each program's bytes as HBM traffic, and its FLOPs at least its matmuls'.

    XProf's bytes count every memory space; the roofline model's HBM share makes them HBM bytes. The op profile
    costs nothing for an op whose HLO names a custom call, an ordinary fusion that only reads a custom call's
    result included, so its programs' bytes together are at least what the roofline model, which counts every op,
    measures in HBM: where they fall short, each program's bytes grow by the same factor. A program reads its
    inputs and constants and writes its outputs at least once a run, so that is the least HBM traffic its runs
    make; and XLA's cost model gives custom calls it cannot see into no FLOPs, so the dots and convolutions of its
    HLO are the least work its runs do.
    """
    hbm_share = _hbm_share(roofline_model)
    if hbm_share is not None:
        for program in costs.values():
            program.bytes = None if program.bytes is None else program.bytes * hbm_share
    counted = sum(program.bytes or 0.0 for program in costs.values())
    measured = _hbm_bytes(roofline_model)
    if measured is not None and 0 < counted < measured:
        for program in costs.values():
            program.bytes = None if program.bytes is None else program.bytes * measured / counted
    for name, program in costs.items():
        if not program.runs:
            continue
        if program.bytes is not None and (buffer := buffers.get(name)) is not None:
            once = buffer.inputs_bytes + buffer.outputs_bytes + buffer.constants_bytes
            program.bytes = max(program.bytes, float(once * program.runs))
        program.flops = max(program.flops, sum(w.flops for w in works.get(name, [])) * program.runs)


def _set_aside_miscounts(costs: dict[str, _Costs], chip: Chip | None, works: dict[str, list[KernelWork]]) -> None:
    """A program whose FLOPs run faster than the chip's fastest peak: its FLOPs become its HLO's matmuls (with
    the runs the op profile counts; none without them) and its bytes unknown."""
    if chip is None or not chip.peak_flops:
        return
    fastest = max(chip.peak_flops.values())
    for name, program in costs.items():
        if program.ms > 0 and program.flops / (program.ms / 1e3) > IMPOSSIBLE * fastest:
            program.flops = sum(w.flops for w in works.get(name, [])) * (program.runs or 0)
            program.bytes, program.miscounted = None, True


def timed_kernels(host: HostEvidence, works: list[KernelWork]) -> list[tuple[OpTime, list[KernelWork]]]:
    """Each op the trace timed on the host, with what the HLO instruction it runs computes: in the programs the host
    launched that hold an instruction of that name, or in every program that does when the launches do not tell."""
    by_instruction: dict[str, list[KernelWork]] = {}
    for work in works:
        by_instruction.setdefault(work.instruction, []).append(work)
    launched = {program_base(name) for name in (*(p.name for p in host.programs), *(a.name for a in host.dispatched))}
    found = []
    for op in host.top_ops:
        holding = by_instruction.get(hlo_instruction(op), [])
        found.append((op, [w for w in holding if program_base(w.module) in launched] or holding))
    return found


def matched_kernels(host: HostEvidence, works: list[KernelWork],
                    mark: Callable[[KernelWork], object] = lambda work: True) -> list[tuple[OpTime, KernelWork]]:
    """The ops the trace timed on the host whose HLO instruction is known (:func:`timed_kernels`), each with what it
    computes, where ``mark`` holds for that."""
    return [(op, ran[0]) for op, ran in timed_kernels(host, works) if ran and mark(ran[0])]


@dataclass(frozen=True)
class Rates:
    """The fastest a device runs work: its FLOP/s and, where memory traffic bounds it, its bytes/s."""

    flops_per_s: float
    bytes_per_s: float | None = None

    def least_ms(self, flops: float, moved: float) -> float:
        """The least time work of ``flops`` FLOPs that moves ``moved`` bytes takes at these rates: its roofline."""
        seconds = flops / self.flops_per_s if self.flops_per_s > 0 else 0.0
        if self.bytes_per_s:
            seconds = max(seconds, moved / self.bytes_per_s)
        return seconds * 1e3


def peak_rates(chip: Chip | None, works: list[KernelWork]) -> Rates | None:
    """The chip's peak FLOP/s for the dtype of ``works``' matmuls (its headline peak without any) and its HBM
    bandwidth; None without a chip, or where it publishes no peak for that dtype."""
    dtype = _peak_dtype(chip, works) if chip is not None else None
    if chip is None or dtype is None:
        return None
    return Rates(chip.peak_flops[dtype], chip.hbm_bytes_per_s)


def achieved_rates(kernels: list[tuple[OpTime, KernelWork]]) -> Rates | None:
    """The FLOP/s the kernels achieved (their HLO's FLOPs over the time the trace measured for them), not bound by
    bytes: the rate new work is held to where no peak is known (a CPU, whose caches keep a product's operands near,
    so the bytes its HLO names are not memory traffic). None where they do no FLOPs or took no time."""
    flops = sum(work.flops * op.count_per_step for op, work in kernels)
    ms = sum(op.self_ms_per_step for op, _ in kernels)
    return Rates(flops / (ms / 1e3)) if flops > 0 and ms > 0 else None


def _hlo_costs(hosts: list[HostEvidence], works: list[KernelWork]) -> dict[str, _Costs]:
    """Device time and matmul FLOPs per program, from the ops the trace timed and their instructions' HLO."""
    costs: dict[str, _Costs] = {}
    for host in hosts:
        runs = max(host.steps, 1) * max(host.devices, 1)
        for op, ran in timed_kernels(host, works):
            if len({w.module for w in ran}) != 1:  # no program, or several that one name cannot tell apart
                continue
            program = costs.setdefault(ran[0].module, _Costs(bytes=None))
            program.ms += op.self_ms_per_step * runs
            program.copy_ms += op.self_ms_per_step * runs if _COPY.match(op.name) else 0.0
            program.flops += ran[0].flops * op.count_per_step * runs
    return costs


def _matmul_dtype(works: Iterable[KernelWork]) -> str:
    """The operands' dtype of a program's matmuls, weighted by their FLOPs."""
    weights: dict[str, float] = {}
    for work in works:
        if work.matmul_dtype:
            weights[work.matmul_dtype] = weights.get(work.matmul_dtype, 0.0) + work.flops
    return max(weights, key=weights.__getitem__, default="")


def _peak_dtype(chip: Chip, works: list[KernelWork]) -> str | None:
    """The chip's peak a program's matmuls run against (its headline peak without matmuls); None where the chip
    publishes none for them."""
    dtype = _matmul_dtype(works)
    if not dtype:
        return next(d for d in (*_HEADLINE_DTYPES, *chip.peak_flops) if d in chip.peak_flops)
    precision = "highest" if any(w.precision == "highest" for w in works if w.matmul_dtype == dtype) else ""
    return peak_dtype(chip, dtype, precision)


LATENCY = "latency, small kernels or waits hold it back, not the hardware"
SLOW_PRECISION = "its f32 matmuls at HIGHEST precision take several passes of the chip's fast matmul path each"
COPIES = "most of its device time is asynchronous copies (copy-start / copy-done), waits on transfers, not work"


def _verdict(program: ProgramRoofline, held_back: str = LATENCY) -> tuple[str, str]:
    """The roofline verdict and the sentence that states it; ``held_back`` says why a program far from both limits
    is there."""
    flops = program.flops_fraction
    bandwidth = program.bandwidth_fraction
    intensity, ridge = program.arithmetic_intensity, program.ridge_point
    peak = f"the {program.peak_dtype} peak FLOP/s"
    if program.peak_bytes_per_s is None:
        return "", "no verdict: no published peaks for this device (a CPU, or a device type the table does not name)"
    if flops is None:
        return "", (f"no verdict: the chip publishes no peak for {program.matmul_dtype} matmuls (not a fast path "
                    "it has, or emulated)")
    if intensity is None or ridge is None or bandwidth is None:
        if flops >= NEAR_ROOFLINE:
            return "compute-bound", f"compute-bound near the roof: {_percent(flops)} of {peak}"
        return "", f"{_percent(flops)} of {peak}; the bytes it moves are not known, so no verdict on memory"
    where = f"{intensity:.3g} FLOPs per byte against a ridge point of {ridge:.3g}"
    if intensity >= ridge and flops >= NEAR_ROOFLINE:
        return "compute-bound", f"compute-bound near the roof: {_percent(flops)} of {peak} at {where}"
    if intensity < ridge and bandwidth >= NEAR_ROOFLINE:
        return "memory-bound", (f"memory-bound near the memory roof: {_percent(bandwidth)} of the HBM bandwidth at "
                                f"{where}; healthy for its arithmetic intensity, only less memory traffic makes it "
                                "faster")
    return "neither", (f"far from both limits: {_percent(flops)} of {peak} and {_percent(bandwidth)} of the HBM "
                       f"bandwidth at {where}; {held_back}")


def _percent(fraction: float) -> str:
    """A share with one decimal, or two significant digits below 0.1 % (a program at 0.0012 % of its peak)."""
    return f"{fraction:.1%}" if fraction >= 0.001 or fraction == 0 else f"{fraction * 100:.2g}%"


def _fraction(value: float) -> float:
    return min(1.0, max(0.0, value))


def _program(name: str, source: str, costs: _Costs, total_ms: float, works: list[KernelWork],
             chip: Chip | None) -> ProgramRoofline:
    seconds = costs.ms / 1e3
    program = ProgramRoofline(
        program=name, source=source, device_ms=costs.ms, share_of_device=_fraction(costs.ms / total_ms),
        flops=costs.flops, bytes_accessed=costs.bytes, achieved_flops_per_s=costs.flops / seconds,
        achieved_bytes_per_s=None if costs.bytes is None else costs.bytes / seconds,
        arithmetic_intensity=costs.flops / costs.bytes if costs.bytes else None,
        matmul_dtype=_matmul_dtype(works),
    )
    if chip is not None:
        program.peak_dtype = _peak_dtype(chip, works) or ""
        program.peak_bytes_per_s = chip.hbm_bytes_per_s
        if program.peak_dtype:
            peak = program.peak_flops_per_s = chip.peak_flops[program.peak_dtype]
            program.ridge_point = peak / chip.hbm_bytes_per_s
            program.flops_fraction = _fraction(program.achieved_flops_per_s / peak)
        if program.achieved_bytes_per_s is not None:
            # XProf's bytes count every memory space (on-chip ones too), so they can exceed the HBM peak.
            program.bandwidth_fraction = _fraction(program.achieved_bytes_per_s / chip.hbm_bytes_per_s)
    highest = any(w.precision == "highest" and w.matmul_dtype == "f32" for w in works)
    slow = highest and program.matmul_dtype == "f32" and program.peak_dtype not in ("", "f32")
    held_back = COPIES if costs.copy_ms >= 0.5 * costs.ms else SLOW_PRECISION if slow else LATENCY
    program.verdict, program.statement = _verdict(program, held_back)
    if costs.miscounted:
        program.statement += ("; XProf's cost model counted more FLOP/s for it than the chip can run, so its FLOPs "
                              "are its HLO's matmuls and its bytes are not known")
    return program


def program_rooflines(hosts: list[HostEvidence], op_profile: dict[str, Any], works: list[KernelWork],
                      chip: Chip | None, buffers: Iterable[HloProgram] = (),
                      roofline_model: dict[str, Any] | None = None) -> list[ProgramRoofline]:
    """The programs that hold the device time, each with its achieved rates and verdict, largest first.

    ``buffers``: each HLO program's inputs, outputs and constants; ``roofline_model``: XProf's
    (get_roofline_model), whose HBM figures turn the op profile's bytes into HBM bytes.
    """
    by_module: dict[str, list[KernelWork]] = {}
    for work in works:
        by_module.setdefault(work.module, []).append(work)
    costs, source = _op_profile_costs(op_profile), "op_profile"
    if any(c.flops for c in costs.values()):
        _in_hbm(costs, roofline_model or {}, {b.module: b for b in buffers}, by_module)
        _set_aside_miscounts(costs, chip, by_module)
    else:
        costs, source = _hlo_costs(hosts, works), "hlo"
    timed = {name: c for name, c in costs.items() if c.ms > 0}
    total_ms = sum(c.ms for c in timed.values())
    listed = sorted(timed.items(), key=lambda item: -item[1].ms)[:MAX_PROGRAMS]
    return [_program(name, source, c, total_ms, by_module.get(name, []), chip)
            for name, c in listed if c.ms >= MIN_PROGRAM_SHARE * total_ms]


def _step_flops_per_device(hosts: list[HostEvidence], programs: list[ProgramRoofline], steps: int) -> float:
    devices = sum(max(host.devices, 1) for host in hosts) or 1
    return sum(p.flops for p in programs) / devices / max(steps, 1)


def fill_metrics(metrics: Metrics, hosts: list[HostEvidence], programs: list[ProgramRoofline],
                 chip: Chip | None) -> None:
    """The chip, its peaks, the achieved rates of every listed program together, and MFU for a loop of steps."""
    seconds = sum(p.device_ms for p in programs) / 1e3
    if seconds > 0:
        metrics.achieved_tflops = sum(p.flops for p in programs) / seconds / 1e12
    if chip is None:
        return
    metrics.hardware, metrics.hardware_source = chip.name, chip.source
    metrics.peak_hbm_bytes_per_s = chip.hbm_bytes_per_s
    held = [p for p in programs if p.peak_flops_per_s]
    main = max(held, key=lambda p: p.flops, default=None)
    if main is not None:
        metrics.peak_dtype = main.peak_dtype
        metrics.peak_tflops = main.peak_flops_per_s / 1e12
    moved = [p for p in programs if p.bytes_accessed is not None]
    if moved and seconds > 0:
        moved_seconds = sum(p.device_ms for p in moved) / 1e3
        metrics.hbm_bandwidth_fraction = _fraction(sum(p.bytes_accessed for p in moved) / moved_seconds
                                                   / chip.hbm_bytes_per_s)
    stepped = metrics.step_time_ms and metrics.steps and all(
        host.step_source is not StepSource.PROFILE_WINDOW for host in hosts)
    if main is not None and stepped:
        per_second = _step_flops_per_device(hosts, programs, metrics.steps) / (metrics.step_time_ms / 1e3)
        metrics.mfu = _fraction(per_second / main.peak_flops_per_s)
