"""The evidence an analysis collects, as typed data.

Each host's raw-event evidence is in :mod:`mldiag.analysis.host_evidence`. The
deterministic analyst reads it all to write findings; the reasoning model and
the HTML report read the same objects (``analysis.json`` is
:class:`Analysis` serialised). Every ``name`` below comes from a profile and is
untrusted text: it is carried as data, never interpreted, and has to be escaped
or fenced off wherever it is shown or put into a prompt.

Times are per training step wherever a step is known (``*_per_step``), so that a
profile of 10 steps and one of 10,000 read the same.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mldiag.analysis.host_evidence import HostEvidence
from mldiag.domain.resources import Finding, HealthStatus


class ToolStatus(StrEnum):
    OK = "ok"
    NO_DATA = "no_data"
    ERROR = "error"
    SKIPPED = "skipped"  # could not run within the analysis's memory ceiling or XProf's size limit
    ON_OPEN = "on_open"  # not converted by the analysis, which reads nothing of it: converted when opened


class Evidence(BaseModel):
    model_config = ConfigDict(extra="forbid", use_enum_values=False)


class ToolResult(Evidence):
    """One of the 15 XProf tools of the managed product, run on this session."""

    name: str
    status: ToolStatus
    seconds: float
    data: Any = None
    reason: str = ""  # why there is no data, or what failed
    note: str = ""  # how the result was made, where that is not XProf's own way
    host: str = ""  # in a session analysed host by host, the host whose result this is


class HloIssue(Evidence):
    """One pattern a detector found in a compiled HLO module."""

    module: str
    instruction: str
    runs_as: str  # the instruction that executes it: itself, or the fusion it is part of
    detail: str
    shapes: list[str] = Field(default_factory=list)


class HloProgram(Evidence):
    """``analysis.json.hlo_programs``: a compiled program's parameters, results and largest intermediate buffer."""

    module: str
    inputs_bytes: int
    outputs_bytes: int
    constants_bytes: int = 0  # arrays built into the program (weights a jitted function closed over)
    largest_temporary: str = ""  # the entry-level instruction whose result it is
    largest_temporary_bytes: int = 0
    parameters: dict[str, str] = Field(default_factory=dict)  # each entry parameter's shape, in order
    fingerprint: str = ""  # of the program's text without its name: a compilation of the same program again matches
    # Its kernels (entry-level fusions) that compute, whatever their names say: XLA names a fusion after its
    # root, so a bf16 sine computed in f32 runs as "loop_convert_fusion".
    computing_fusions: list[str] = Field(default_factory=list)
    # Entry parameters updated in place into an output without being donated, each copied whole every call:
    # parameter -> the kernels that run its updates.
    undonated: dict[str, list[str]] = Field(default_factory=dict)


class DataMovement(Evidence):
    """``analysis.json.data_movement``: device time in one kind of op that moves or re-types data, on the host where
    it weighs most (per step, or per capture without steps), as its finding quotes it."""

    kind: str  # "host_transfer", "convert", "layout" or "undonated" (an in-place update copying its argument)
    host: str
    ms_per_step: float  # per device
    device_ms_per_step: float  # all device op time, per device
    share_of_device: float  # ms_per_step / device_ms_per_step
    share_of_loop: float  # of the loop's wall time: the mean step and the gap after it (the capture, without steps)
    to_device_bytes_per_step: float = 0.0  # host transfers: what the finished copies moved, from their HLO shapes
    to_host_bytes_per_step: float = 0.0
    # Undonated arguments: the device time of the programs that copy one first, where the copies are most of it
    # (out-of-place updates): the copy and the update written into it, what donating the argument saves.
    updates_ms_per_step: float = 0.0
    updates_share_of_loop: float = 0.0  # of the loop's wall time, as share_of_loop


class KernelShare(Evidence):
    """``analysis.json.kernels``: a kernel that holds much of a host's device op time, and what its HLO computes,
    as the findings that explain where device time goes quote it."""

    host: str
    name: str  # as the device trace names it
    hlo_op: str = ""  # the HLO instruction it runs, where the trace or the HLO tells
    share_of_device: float  # of the host's device op time
    ms_per_step: float  # per device, per step (per capture without steps)
    runs_per_step: float
    what: str = ""  # what that instruction computes, from the HLO; "" where the profile holds none for it
    updates_per_element: float = 0.0  # a scatter's updates per element of what it updates; 0 for other ops
    one_hot_classes: int = 0  # the classes of a one-hot matrix its matmuls multiply by; 0 for other ops
    custom_calls: list[str] = Field(default_factory=list)  # the targets of the custom calls it is
    programs: list[str] = Field(default_factory=list)  # the launched programs whose HLO holds the instruction


class ProgramRoofline(Evidence):
    """``analysis.json.roofline``: a program's achieved FLOP/s and bytes/s over its measured device time, against
    the chip's peaks (:mod:`mldiag.analysis.rules.hardware`), and the verdict that puts it on the roofline."""

    program: str
    source: str  # where the FLOPs and bytes come from: "op_profile" (XProf's per-op costs) or "hlo" (its matmuls)
    device_ms: float  # device time of its ops over the capture, summed over devices
    share_of_device: float  # of the device time of every program listed
    flops: float  # in that time
    bytes_accessed: float | None = None  # None where the source does not tell
    achieved_flops_per_s: float
    achieved_bytes_per_s: float | None = None
    arithmetic_intensity: float | None = None  # FLOPs per byte
    matmul_dtype: str = ""  # the operands' dtype of its matmuls (FLOP-weighted); "" without matmuls
    peak_dtype: str = ""  # the chip's peak it is held to: its matmuls' (bf16 for f32 at default precision on TPU)
    peak_flops_per_s: float | None = None  # None: no known chip, or no published peak for its dtype
    peak_bytes_per_s: float | None = None
    ridge_point: float | None = None  # FLOPs per byte where the chip turns compute-bound at that peak
    flops_fraction: float | None = None  # achieved / peak FLOP/s
    bandwidth_fraction: float | None = None  # achieved / peak HBM bytes/s
    verdict: str = ""  # "compute-bound", "memory-bound", "neither"; "" without a chip's peaks
    statement: str = ""  # the verdict in words


class SlowPrecision(Evidence):
    """``analysis.json.slow_precision``: device time in a slow dtype or precision, on the host where it weighs most,
    as its finding quotes it."""

    # "float64" (math in f64), "highest" (f32 matmuls at precision HIGHEST on a bf16/TF32 chip) or "wide_integer"
    # (matmuls of int32 or int64 operands)
    kind: str
    host: str
    ms_per_step: float  # per device (per capture without steps)
    share_of_device: float  # of the host's device op time
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class NarrowMatmuls(Evidence):
    """``analysis.json.narrow_matmuls``: batched matmuls narrower than a TPU's matrix unit (attention heads of 64 on
    a 128-wide unit), with the kernels that run them or read or write their score matrices, on the host where wider
    ones would save the most, as its finding quotes it."""

    host: str
    width: int  # the narrowest rows, contracted size or columns of the batched matmuls
    matrix_unit: int  # the chip's matrix unit's side
    fill: float  # width / matrix_unit
    ms_per_step: float  # of those kernels, per device (per capture without steps)
    share_of_device: float  # of the host's device op time
    saved_share_of_loop: float  # the part of the loop that heads as wide as the unit would save
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class DenseTableUpdates(Evidence):
    """``analysis.json.dense_updates``: a lookup's gradient scattered into zeros as large as its table and applied
    whole every step, with the kernels that zero, scatter into, read or write arrays of the table's size, on the
    host where updating only the looked-up rows would save the most, as its finding quotes it."""

    host: str
    table_shape: list[int]  # of the gradient, as large as the table looked up
    updates_per_element: float  # the scatter's updates over the table's elements: the share the step's rows are
    ms_per_step: float  # of those kernels, per device (per capture without steps)
    share_of_device: float  # of the host's device op time
    saved_share_of_loop: float  # the part of the loop an update of the looked-up rows alone would save
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class MatrixDecompositions(Evidence):
    """``analysis.json.decompositions``: the library kernels of a matrix decomposition (LU, Cholesky, QR, an
    eigendecomposition) the steps run, on the host where they take the largest share of the loop, as its finding
    quotes them."""

    host: str
    targets: list[str]  # the custom calls' targets, longest-running first
    ms_per_step: float  # per device (per capture without steps)
    share_of_device: float  # of the host's device op time
    share_of_loop: float
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class SubsampledResults(Evidence):
    """``analysis.json.subsampled_results``: matmul or convolution results computed in full and read one element in
    N or fewer through slices, with the kernels that compute them or their gradients, on the host where the work on the
    discarded elements takes the largest share of the loop, as its finding quotes it."""

    host: str
    kept_one_in: int  # N: elements computed per element read
    ms_per_step: float  # of those kernels, per device (per capture without steps)
    share_of_device: float  # of the host's device op time
    share_of_loop_discarded: float  # of the loop, the kernels' time on the discarded elements
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class UncachedDecoding(Evidence):
    """``analysis.json.uncached_decoding``: a decoding program that recomputes every position of its buffer at each
    call to add one token (no key/value cache), with the kernels that span every position, on the host where the
    recomputation takes the largest share of the loop, as its finding quotes it."""

    host: str
    positions: int  # the buffer's positions, each recomputed at every call
    ms_per_step: float  # of those kernels, per device (per capture without steps)
    share_of_device: float  # of the host's device op time
    share_of_loop_recomputed: float  # of the loop, the kernels' time on the positions the calls before computed
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class PerExampleWeights(Evidence):
    """``analysis.json.per_example_weights``: batched matmuls that multiply each batch element by its own copy of
    one matrix broadcast along the batch, with the kernels that multiply, make or read the copies, on the host where
    one product over the batch saves the largest share of the loop, as its finding quotes it."""

    host: str
    batch: int  # copies of the matrix, one per batch element
    matrix: list[int] = Field(default_factory=list)  # the copied matrix's dimensions
    ms_per_step: float  # of those kernels, per device (per capture without steps)
    share_of_device: float  # of the host's device op time
    share_of_loop_saved: float  # of the loop, what one product over the batch would save
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class TriangularRunningSums(Evidence):
    """``analysis.json.triangular_running_sums``: matmuls by a triangular matrix of ones (running sums written as
    ``tril(ones) @ x``), with the kernels that run them or make the matrix, on the host where summing in chunks saves
    the largest share of the loop, as its finding quotes it."""

    host: str
    positions: int  # the triangular matrix's size: the positions each running sum spans
    chunk: int  # positions per chunk of the chunked form the saving is estimated for
    ms_per_step: float  # of those kernels, per device (per capture without steps)
    chunked_ms_per_step: float  # the least time the chunked form takes in their place
    share_of_device: float  # of the host's device op time
    share_of_loop_saved: float  # of the loop, what summing in chunks would save
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class PairwiseByBroadcast(Evidence):
    """``analysis.json.pairwise_by_broadcast``: every row of one matrix combined with every row of another feature
    by feature (pairwise distances by broadcasting), with the kernels that make or read the [n, m, d] differences,
    on the host where the matmul form saves the largest share of the loop, as its finding quotes it."""

    host: str
    rows: int  # n: rows of the first matrix
    other_rows: int  # m: rows of the second
    features: int  # d: the features each pair is combined over
    ms_per_step: float  # of those kernels, per device (per capture without steps)
    matmul_ms_per_step: float  # the least time the matmul form takes in their place
    share_of_device: float  # of the host's device op time
    share_of_loop_saved: float  # of the loop, what the matmul form would save
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class KroneckerProducts(Evidence):
    """``analysis.json.kronecker_products``: matmuls by a Kronecker product made in full (``x @ jnp.kron(a, b)``),
    with the kernels that make, multiply by or differentiate it, on the host where applying its factors in turn
    saves the largest share of the loop, as its finding quotes it."""

    host: str
    factors: list[list[int]] = Field(default_factory=list)  # the two factors' shapes, [[p, q], [r, s]]
    ms_per_step: float  # of those kernels, per device (per capture without steps)
    factored_ms_per_step: float  # the least time the factors applied in turn take in their place
    share_of_device: float  # of the host's device op time
    share_of_loop_saved: float  # of the loop, what the factored form would save
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class FullJacobians(Evidence):
    """``analysis.json.full_jacobians``: Jacobians built in full, derivatives seeded by an n x n identity
    (``jax.jacrev`` / ``jax.jacfwd``), with the kernels that seed them and compute on them, on the host where
    products with vectors instead (``jax.vjp`` / ``jax.jvp``) save the largest share of the loop, as its finding
    quotes it."""

    host: str
    basis: int  # n: the identity's size, the derivatives computed where a product with one vector needs one
    ms_per_step: float  # of those kernels, per device (per capture without steps)
    share_of_device: float  # of the host's device op time
    share_of_loop_saved: float  # of the loop, what products with one vector would save
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class ZeroedWork(Evidence):
    """``analysis.json.zeroed_work``: kernels computing what a constant zero throws away (a loss term weighted 0.0:
    its forward pass multiplied by zero, its backward pass multiplying gradients of zeros), on the host where they
    take the largest share of the loop, as its finding quotes it."""

    host: str
    ms_per_step: float  # of those kernels' zeroed work, per device (per capture without steps)
    share_of_device: float  # of the host's device op time
    share_of_loop_saved: float  # of the loop, what leaving the term out would save
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class MaskedResults(Evidence):
    """``analysis.json.masked_results``: matmul results a mask of positions mostly discards (sliding-window attention
    written as full attention), with the kernels that compute, mask or read them, on the host where computing only
    the kept blocks saves the largest share of the loop, as its finding quotes it."""

    host: str
    kept_one_in: int  # N: elements computed per element the mask keeps
    ms_per_step: float  # of those kernels, per device (per capture without steps)
    share_of_device: float  # of the host's device op time
    share_of_loop_saved: float  # of the loop, what the blocked form would save
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class CostlyProductOrders(Evidence):
    """``analysis.json.costly_product_orders``: a matmul chain ``(a @ b) @ c`` multiplied in the order that makes a
    large [m, n] intermediate, where ``a @ (b @ c)`` takes several times fewer FLOPs, with the kernels that make or
    read arrays of the intermediate's size (its gradient's too), on the host where reassociating saves the largest
    share of the loop, as its finding quotes it."""

    host: str
    batch: int  # products of each shape the chain makes at once (batch elements x heads)
    m: int  # a: [m, k]
    k: int  # b: [k, n]
    n: int  # c: [n, p]
    p: int
    flops: float  # of the chain per run, in the order the program multiplies in
    reassociated_flops: float  # of the chain per run, in the other order
    fewer_flops: float  # flops / reassociated_flops
    ms_per_step: float  # of those kernels, per device (per capture without steps)
    # The least time per step the other order's products take in those kernels' place: their roofline at the chip's
    # peaks, or, where none is known, at the FLOP rate the kernels achieved.
    reassociated_ms_per_step: float
    share_of_device: float  # of the host's device op time
    share_of_loop_saved: float  # of the loop, the kernels' time less what the other order's products take
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class UnfoldedInputs(Evidence):
    """``analysis.json.unfolded_inputs``: an input copied as shifted windows side by side and multiplied (a
    convolution written by hand), with the kernels that write or read the copies, on the host where they take the
    largest share of the loop, as its finding quotes it."""

    host: str
    windows: int  # slices side by side in the copies' buffer
    ms_per_step: float  # of those kernels, per device (per capture without steps)
    share_of_device: float  # of the host's device op time
    share_of_loop: float
    kernels: list[str] = Field(default_factory=list)  # as the device trace names them, longest first


class Metrics(Evidence):
    step_time_ms: float | None = None
    steps: int = 0
    busy_fraction: float | None = None
    peak_memory_bytes: int | None = None
    peak_memory_source: str = ""
    memory_capacity_bytes: int | None = None
    roofline_efficiency: float | None = None
    # The chip's published limits (hardware.py) and how close the programs came to them.
    hardware: str = ""  # the chip the peaks are for; "" where the device type names none
    hardware_source: str = ""  # the datasheet its peaks come from
    peak_dtype: str = ""  # the dtype of the peak below: the programs' matmuls'
    peak_tflops: float | None = None
    peak_hbm_bytes_per_s: float | None = None
    achieved_tflops: float | None = None  # FLOPs over device op time, every program with costs together
    hbm_bandwidth_fraction: float | None = None  # bytes accessed over device op time, of the peak HBM bandwidth
    mfu: float | None = None  # the step's FLOPs per step time, of the peak: model FLOPs utilisation


class Health(Evidence):
    """The snapshot that decides OPTIMAL: compute high, idle, communication and OOM risk low."""

    compute_fraction: float | None = None
    idle_fraction: float | None = None
    communication_fraction: float | None = None
    memory_fraction: float | None = None  # peak / capacity, where the capacity is known
    dispatches_per_step: float = 0.0
    compile_fraction: float = 0.0
    optimal: bool = False
    reasons: list[str] = Field(default_factory=list)


class ProfileInput(Evidence):
    source: str
    session: str
    files: list[str]
    bytes: int


class Followup(Evidence):
    """One follow-up check of the investigation: what was asked, why, and what it showed."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    why: str
    status: ToolStatus
    showed: str
    seconds: float
    output: str = ""  # the tool's answer, capped; profile strings in it are data


class Investigation(Evidence):
    """Who reasoned over the evidence, and what the reasoner asked for that was refused or dropped."""

    reasoner: str  # "offline" or "vertex"
    model: str = ""
    fallback_reason: str = ""  # why the configured reasoner was not the one that answered
    note: str = ""
    hypotheses: list[str] = Field(default_factory=list)
    refused: list[str] = Field(default_factory=list)  # follow-ups proposed but not run, with the reason
    dropped: list[str] = Field(default_factory=list)  # findings rejected by validation, with the reason
    tokens: int = 0
    seconds: float = 0.0


class Change(Evidence):
    """A metric before (the baseline) and after (this session)."""

    before: float | None = None
    after: float | None = None

    @property
    def ratio(self) -> float | None:
        if self.before in (None, 0) or self.after is None:
            return None
        return self.after / self.before - 1


class TimeChange(Evidence):
    """An op or host activity whose time per step appeared or grew."""

    name: str
    before_ms_per_step: float
    after_ms_per_step: float

    @property
    def delta_ms(self) -> float:
        return self.after_ms_per_step - self.before_ms_per_step


class Comparison(Evidence):
    """``analysis.json.comparison``: what changed against an earlier session of the run."""

    baseline_session: str
    baseline_status: HealthStatus | None = None  # the baseline's own verdict: only OPTIMAL is called healthy
    headline: list[str] = Field(default_factory=list)
    step_time_ms: Change = Field(default_factory=Change)
    busy_fraction: Change = Field(default_factory=Change)
    gap_ms_per_step: Change = Field(default_factory=Change)
    idle_ms_per_step: Change = Field(default_factory=Change)
    dispatches_per_step: Change = Field(default_factory=Change)
    peak_memory_bytes: Change = Field(default_factory=Change)
    new_ops: list[TimeChange] = Field(default_factory=list)
    grown_ops: list[TimeChange] = Field(default_factory=list)
    grown_host_activities: list[TimeChange] = Field(default_factory=list)


class Analysis(Evidence):
    """Everything one analysis found; ``analysis.json`` is this object."""

    status: HealthStatus
    summary: str
    metrics: Metrics
    health: Health
    findings: list[Finding] = Field(default_factory=list)
    tools: list[ToolResult] = Field(default_factory=list)
    hosts: list[HostEvidence] = Field(default_factory=list)
    hlo_issues: dict[str, list[HloIssue]] = Field(default_factory=dict)
    hlo_programs: list[HloProgram] = Field(default_factory=list)
    data_movement: list[DataMovement] = Field(default_factory=list)
    kernels: list[KernelShare] = Field(default_factory=list)
    roofline: list[ProgramRoofline] = Field(default_factory=list)
    slow_precision: list[SlowPrecision] = Field(default_factory=list)
    narrow_matmuls: list[NarrowMatmuls] = Field(default_factory=list)
    dense_updates: list[DenseTableUpdates] = Field(default_factory=list)
    decompositions: list[MatrixDecompositions] = Field(default_factory=list)
    unfolded_inputs: list[UnfoldedInputs] = Field(default_factory=list)
    subsampled_results: list[SubsampledResults] = Field(default_factory=list)
    uncached_decoding: list[UncachedDecoding] = Field(default_factory=list)
    costly_product_orders: list[CostlyProductOrders] = Field(default_factory=list)
    per_example_weights: list[PerExampleWeights] = Field(default_factory=list)
    triangular_running_sums: list[TriangularRunningSums] = Field(default_factory=list)
    pairwise_by_broadcast: list[PairwiseByBroadcast] = Field(default_factory=list)
    kronecker_products: list[KroneckerProducts] = Field(default_factory=list)
    masked_results: list[MaskedResults] = Field(default_factory=list)
    full_jacobians: list[FullJacobians] = Field(default_factory=list)
    zeroed_work: list[ZeroedWork] = Field(default_factory=list)
    followups: list[Followup] = Field(default_factory=list)
    investigation: Investigation | None = None
    comparison: Comparison | None = None
    missing_hosts: dict[str, str] = Field(default_factory=dict)  # host -> why its evidence is not in this analysis
    # Evidence the analysis could not collect (a kernel detector that failed on a program) -> why; the findings that
    # would read it are not made.
    missing_evidence: dict[str, str] = Field(default_factory=dict)
    profile: ProfileInput
    versions: dict[str, str] = Field(default_factory=dict)
    seconds: float = 0.0

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)
