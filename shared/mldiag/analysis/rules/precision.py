"""Dtype and precision checks: device time in float64, in float32 matmuls at HIGHEST precision, or in matmuls
of 32- or 64-bit integers.

Each op the trace timed is matched to the HLO instruction it runs (in the
programs the host launched) and to what that instruction computes
(:func:`mldiag.analysis.xprof.hlo.kernel_work`), so the share of device time each
check names is measured, not estimated from the HLO:

* **float64**: kernels whose math computes in f64. A CPU's SIMD lanes hold
  half as many f64 values as f32 (its f64 matmuls run at about half the
  speed); GPUs give f64 a fraction of their f32 and tensor-core peaks; TPUs
  have no f64 unit and emulate it: the compiled program splits each f64 value
  into f32 pieces, so its kernels read as f32 and only the program's f64
  parameters tell, and every kernel of such a program is that emulation.
* **HIGHEST precision**: f32 dots and convolutions that ask for
  ``precision=HIGHEST`` on a chip whose matmul fast path is narrower: on a TPU
  an f32 matmul at default precision is one bf16 pass and at HIGHEST six; on
  NVIDIA Ampere and later, default f32 matmuls run as TF32 on the tensor cores
  and HIGHEST keeps them in full f32. On a CPU HIGHEST changes nothing and is
  not flagged, nor are the matmuls of a program that runs a matrix
  decomposition's library calls: a TPU expands the rest of an LU or a
  triangular solve into f32 matmuls at HIGHEST of its own, which the program
  did not ask for and which are the solver's time.
* **wide integer matmuls**: dots and convolutions of int32 (or int64)
  operands. No matrix unit multiplies them: a TPU's MXU takes bf16 and int8,
  tensor cores take int8, and a CPU's optimised matmuls are float; the
  compiler runs them on the vector units. Measured on a TPU v5e, co-occurrence
  counts ``c.T @ c`` of an int32 8192 x 8192 matrix took 8x as long as the
  same counts in bf16 with an f32 accumulator (exact for inputs below 256
  and sums below 2^24); on a CPU, 3x.
"""

from __future__ import annotations

from collections.abc import Callable

from mldiag.analysis.evidence import HloProgram, SlowPrecision
from mldiag.analysis.host_evidence import DeviceKind, HostEvidence, OpTime, ProgramCalls
from mldiag.analysis.rules import frameworks, linear_algebra
from mldiag.analysis.rules.frameworks import Framework
from mldiag.analysis.rules.hardware import Chip
from mldiag.analysis.rules.roofline import matched_kernels
from mldiag.analysis.rules.wording import quoted
from mldiag.analysis.xprof.hlo import KernelWork, describe
from mldiag.domain.resources import Finding, FindingCategory, Priority

# Share of a host's device op time the fast dtype or precision would save at which the slow one is a P0 / P1 / P2
# problem: on an accelerator nearly all of the time in a mode several times slower, on a CPU half of float64's.
PRIORITIES = ((0.5, Priority.P0), (0.25, Priority.P1), (0.05, Priority.P2))
MAX_KERNELS_QUOTED = 3


def _is_float64(work: KernelWork) -> bool:
    return work.matmul_dtype == "f64" or "f64" in work.dtypes


_WIDE_INTEGERS = ("s32", "u32", "s64", "u64")


def _is_wide_integer_matmul(work: KernelWork) -> bool:
    return work.matmul_dtype in _WIDE_INTEGERS


def _is_highest_f32_matmul(work: KernelWork) -> bool:
    return work.matmul_dtype == "f32" and work.precision == "highest"


def _fast_path_is_narrower(host: HostEvidence, chip: Chip | None) -> bool:
    """Whether f32 matmuls at default precision run faster than at HIGHEST on this host's devices."""
    return host.device_kind is DeviceKind.TPU or (chip is not None and bool(chip.fast_f32))


def _evidence(host: HostEvidence, slow: SlowPrecision, matched: list[tuple[OpTime, KernelWork]],
              label: str, whole: list[ProgramCalls]) -> list[str]:
    per = host.per()
    lines = [f"{label}: {slow.ms_per_step:.2f} ms per {per} ({slow.share_of_device:.1%} of device op time, per "
             f"device) in {len(matched)} kernel{'s' if len(matched) != 1 else ''}, measured from the trace and "
             "matched to their HLO" + (", and every other kernel of the programs below" if whole else "")]
    lines += [f"program {quoted(program.name)} takes float64 parameters, which the TPU emulates with float32 pieces "
              f"in all its kernels: {program.share_of_device:.1%} of device time" for program in whole]
    lines += [f"{op.share_of_busy:.1%} of device op time ({op.self_ms_per_step:.2f} ms per {per}) in "
              f"{describe([work])}, kernel {quoted(op.name)} of program {quoted(work.module)}"
              for op, work in matched[:MAX_KERNELS_QUOTED]]
    return lines


def _float64_fix(framework: Framework) -> str:
    if framework in (Framework.TENSORFLOW, Framework.TENSORFLOW_EAGER):
        return ("Compute in float32 (or a mixed_bfloat16 / mixed_float16 policy on an accelerator): create variables "
                "and inputs as tf.float32 and cast numpy float64 arrays with tf.cast(x, tf.float32) at the input "
                "boundary; keep float64 only for the few values that need it.")
    return ("Enable float64 only where it is needed: remove jax.config.update('jax_enable_x64', True) (or "
            "JAX_ENABLE_X64=1), or scope it with jax.experimental.enable_x64() around the code that needs it; give "
            "arrays an explicit dtype (jnp.float32, or jnp.bfloat16 on an accelerator) and cast numpy inputs, which "
            "default to float64, with .astype(jnp.float32) before they reach the jitted step.")


_HIGHEST_FIX = ("Use the default matmul precision: drop precision=jax.lax.Precision.HIGHEST (and "
                "jax.default_matmul_precision('highest') / jax_default_matmul_precision='float32'), or give the "
                "matmuls bf16 inputs with preferred_element_type=jnp.float32 to keep an f32 accumulator; where a "
                "computation needs more accuracy, scope it with the jax.default_matmul_precision context manager "
                "around that code only ('high' is three bf16 passes on TPU instead of six). Where the program asks "
                "for no precision, these matmuls are the compiler's own: a TPU computes an FFT (jnp.fft) as f32 "
                "matmuls at HIGHEST, and that time is the FFT's.")


def _finding(host: HostEvidence, kind: str, matched: list[tuple[OpTime, KernelWork]], *, title: str, what: str,
             label: str, why: str, fix: str, whole: list[ProgramCalls] = (),
             lost: float = 1.0) -> tuple[SlowPrecision, Finding] | None:
    """The finding with the device time it names, or None below the lowest priority's share; ``whole``: programs
    all of whose device time is in the slow mode, the timed ops listed or not; ``lost``: the part of that time the
    fast mode would save, which ranks it."""
    matched = sorted(matched, key=lambda m: -m[0].self_ms_per_step)
    steps = max(1, host.steps)
    slow = SlowPrecision(kind=kind, host=host.host,
                         ms_per_step=max(sum(op.self_ms_per_step for op, _ in matched),
                                         sum(p.device_ms_per_call * p.calls for p in whole) / steps),
                         share_of_device=min(1.0, max(sum(op.share_of_busy for op, _ in matched),
                                                      sum(p.share_of_device for p in whole))),
                         kernels=[op.name for op, _ in matched])
    priority = next((p for threshold, p in PRIORITIES if lost * slow.share_of_device >= threshold), None)
    if priority is None:
        return None
    return slow, Finding(
        priority=priority,
        category=FindingCategory.COMPUTE,
        title=title.format(share=slow.share_of_device),
        what=what,
        evidence=_evidence(host, slow, matched, label, list(whole)),
        impact=f"{slow.ms_per_step:.1f} ms of device time per {host.per()} ({slow.share_of_device:.0%}) runs in the "
               f"slow mode; {why}",
        fix=fix,
    )


def _emulating_float64(programs: list[HloProgram]) -> set[str]:
    """The programs that take float64 parameters: on a TPU, every kernel of theirs emulates float64."""
    return {program.module for program in programs
            if any(shape.startswith("f64[") for shape in program.parameters.values())}


def _float64(host: HostEvidence, timed: list[tuple[OpTime, KernelWork]], framework: Framework,
             emulating: set[str]):
    on_cpu = host.device_kind is DeviceKind.CPU
    emulated = emulating if host.device_kind is DeviceKind.TPU else set()
    return _finding(
        host, "float64", [(op, w) for op, w in timed if _is_float64(w) or w.module in emulated],
        whole=[program for program in host.programs if program.name in emulated], lost=0.5 if on_cpu else 1.0,
        title="Float64 math takes {share:.0%} of device time",
        what="Kernels compute in float64 (double precision). "
             + ("A CPU's vector units hold half as many float64 values as float32, so this math runs at about half "
                "the speed it would in float32." if on_cpu else
                "Accelerators give float64 a small fraction of their float32 and bf16 peaks (TPUs have no float64 "
                "unit and emulate it), so this math runs many times slower than it would in float32 or bf16."),
        label="float64 kernels",
        why=("in float32 the same math typically takes about half the time on CPU." if on_cpu else
             "in float32 or bf16 the same math takes a fraction of the time."),
        fix=_float64_fix(framework))


def _highest(host: HostEvidence, timed: list[tuple[OpTime, KernelWork]], chip: Chip | None, solvers: set[str]):
    if not _fast_path_is_narrower(host, chip):
        return None
    return _finding(
        host, "highest", [(op, w) for op, w in timed if _is_highest_f32_matmul(w) and w.module not in solvers],
        title="Float32 matmuls at HIGHEST precision take {share:.0%} of device time",
        what="Float32 matmuls ask for precision=HIGHEST, which turns off the chip's fast matmul path: "
             + ("on a TPU an f32 matmul at default precision is one bf16 pass through the MXU, at HIGHEST six."
                if host.device_kind is DeviceKind.TPU else
                "on NVIDIA Ampere and later, f32 matmuls at default precision run as TF32 on the tensor cores; at "
                "HIGHEST they run in full f32, several times slower."),
        label="f32 matmul kernels at HIGHEST precision",
        why="at default precision (or on bf16 inputs) they run several times faster.",
        fix=_HIGHEST_FIX)


_WIDE_INTEGER_FIX = ("Multiply the integers in a dtype the matrix unit takes: values below 256 in magnitude (counts, "
                     "indicator or one-hot matrices, small ids) are exact in bf16, so cast them and keep an f32 "
                     "accumulator (jax.lax.dot_general(..., preferred_element_type=jnp.float32), exact up to 2^24, "
                     "then .astype(jnp.int32)); values up to 127 can stay integers as int8 with "
                     "preferred_element_type=jnp.int32. Where the integers are larger, split them into 8-bit limbs "
                     "(int8 matmuls summed with shifts) or compute in float32 if the result tolerates its rounding.")


def _wide_integers(host: HostEvidence, timed: list[tuple[OpTime, KernelWork]]):
    on_cpu = host.device_kind is DeviceKind.CPU
    return _finding(
        host, "wide_integer", [(op, w) for op, w in timed if _is_wide_integer_matmul(w)], lost=0.5 if on_cpu else 1.0,
        title="Matmuls of 32-bit integers take {share:.0%} of device time",
        what="Dots or convolutions multiply int32 (or int64) operands. No matrix unit takes them: "
             + ("a CPU's optimised matmul kernels are float, so integer ones run as plain loops."
                if on_cpu else "a TPU's MXU multiplies bf16 and int8, a GPU's tensor cores int8, so the compiler "
                "runs 32-bit integer matmuls on the vector units, many times slower."),
        label="int32 matmul kernels",
        why=("in float32, or bf16 with an f32 accumulator, the same products run several times faster."
             if on_cpu else "on bf16 (or int8) operands with a wider accumulator they run on the matrix unit, "
             "many times faster."),
        fix=_WIDE_INTEGER_FIX)


def findings(hosts: list[HostEvidence], works: list[KernelWork], chip_of: Callable[[HostEvidence], Chip | None],
             programs: list[HloProgram] = ()) -> tuple[list[SlowPrecision], list[Finding]]:
    """Float64 math, HIGHEST-precision f32 matmuls and wide integer matmuls, each on the host where it takes the
    most device time: the device time they take and their findings."""
    framework = frameworks.detect(hosts)
    emulating = _emulating_float64(list(programs))
    solvers = linear_algebra.solver_programs(works)
    worst: dict[str, tuple[SlowPrecision, Finding]] = {}
    for host in hosts:
        timed = matched_kernels(host, works)
        for found in (_float64(host, timed, framework, emulating), _highest(host, timed, chip_of(host), solvers),
                      _wide_integers(host, timed)):
            if found is not None and (found[0].kind not in worst
                                      or found[0].share_of_device > worst[found[0].kind][0].share_of_device):
                worst[found[0].kind] = found
    return [slow for slow, _ in worst.values()], [finding for _, finding in worst.values()]
