"""Compiled HLO modules, and the three detectors XProf removed after 2.23.

The modules come from the profile itself: XProf dumps each one as
``<module>.hlo_proto.pb`` into the session folder and prints it as text through
its ``graph_viewer`` converter. The text is parsed just enough for the
detectors: instructions with their shapes, layouts, operands and the fusion
that runs them.

* ``detect_layout_mismatch_copies``: copies whose only effect is a new layout
  (a physical transpose XLA inserted because producer and consumer disagree).
* ``detect_unfused_reshapes``: reshapes and transposes that run as their own
  kernel, or as a whole program of their own (op-by-op execution).
* ``detect_unnecessary_convert_reduce``: dtype round trips (T1 to T2 and back),
  full-size converts materialised only to feed a reduce, and converts that run
  as programs of their own.

:func:`program_buffers` sizes each program's inputs, outputs and largest
intermediate buffer, for the analyst to weigh against the program's peak memory,
lists its parameters' shapes, which tell a recompiled function's changing
shape, and names its fusions that compute, which a name such as
``loop_convert_fusion`` (a fusion is named after its root) does not tell.
:func:`kernel_work` says what each entry-level kernel computes (a fusion's
math, dtypes and root; a custom call's target), and :func:`describe` puts that
into words for the kernels that hold the device's time.
"""

from __future__ import annotations

import hashlib

import json
import math
import operator
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from mldiag.analysis.evidence import HloIssue, HloProgram

MAX_MODULES = 200
MAX_ISSUES = 50
MIN_PROGRAM_BYTES = 4096  # smaller single-op programs are setup noise (scalars, RNG keys), not hot-loop work
_INSTRUCTION = re.compile(r"^\s*(?P<root>ROOT\s+)?%?(?P<name>[^\s=]+)\s*=\s*(?P<rest>.*)$")
_COMPUTATION = re.compile(r"^(?P<entry>ENTRY\s+)?%?(?P<name>[^\s(]+)\s*\(.*\{\s*$")
_OPCODE = re.compile(r"\s*(?P<opcode>[a-z][\w\-]*)\(")
_OPERAND = re.compile(r"%([^\s,)]+)")
# A module's header names the entry parameters whose buffers its outputs reuse (donated): "{0}: (2, {}, may-alias)".
_ALIASES = "input_output_alias="
_ALIASED_PARAMETER = re.compile(r"\((\d+), \{[^}]*\}, (?:may|must)-alias\)")
_IN_PLACE_UPDATES = frozenset({"dynamic-update-slice", "scatter"})
_PASSES_THROUGH = frozenset({"convert", "bitcast", "copy", "reshape"})  # between a buffer and its update, in a fusion
MIN_UNDONATED_BYTES = 1 << 20  # a buffer updated in place that is copied whole each call, below which it is noise
_CALLS = re.compile(r"calls=%?([^\s,}]+)")
_TO_APPLY = re.compile(r"to_apply=%?([^\s,}]+)")
_FUSION_KIND = re.compile(r"\bkind=k(\w+)")
_TARGET = re.compile(r'custom_call_target="([^"]*)"')
_DIRECTION = re.compile(r"\bdirection=(\w+)")
_IOTA_DIMENSION = re.compile(r"\biota_dimension=(\d+)")
_DIMENSIONS = re.compile(r"\bdimensions=\{([\d,]*)\}")
# HLO's own attribute, and a library GEMM's backend config ("operand_precision":["HIGHEST","HIGHEST"]).
_PRECISION = re.compile(r"operand_precision=\{([^}]*)\}|\"operand_precision\":\[([^\]]*)\]")
_CONTRACTING = re.compile(r"lhs_contracting_dims=\{([\d,]*)\}")
_DOT_DIMS = re.compile(r"\b(lhs_batch|lhs_contracting|rhs_batch|rhs_contracting)_dims=\{([\d,]*)\}")
_ALL_LABELS = re.compile(r"dim_labels=([^_\s]+)_([^-\s]+)->([^,\s]+)")
_KERNEL_LABELS = re.compile(r"dim_labels=[^_\s]*_([^-\s]*)->")
_WINDOW_SIZE = re.compile(r"window=\{[^}]*\bsize=([\dx]+)")
_LHS_DILATE = re.compile(r"window=\{[^}]*\blhs_dilate=([\dx]+)")
_GROUPED = re.compile(r"\b(?:feature|batch)_group_count=(?!1\b)\d+")
_TUPLE_INDEX = re.compile(r"\bindex=(\d+)")
_SLICE_WINDOW = re.compile(r"\bslice=\{([^}]*)\}")
_DTYPE = re.compile(r"^\(*(?P<dtype>[a-z]+\d*)\[")
_ARRAY_SHAPE = re.compile(r"^(?P<dtype>[a-z]+\d*)\[(?P<dims>[\d,]*)\](?:\{(?P<layout>[\d,]*)[^}]*\})?")
_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
                "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_SHAPE_ONLY = frozenset({"parameter", "bitcast", "reshape", "transpose", "copy", "tuple", "get-tuple-element"})
_DATA_MOVES = frozenset({"bitcast", "reshape", "transpose", "copy"})
# Instructions that only move, lay out or re-type data: a fusion of nothing else computes nothing.
_MOVES_OR_RETYPES = _SHAPE_ONLY | {"constant", "convert", "bitcast-convert", "broadcast", "slice", "dynamic-slice",
                                   "concatenate", "pad"}


def element_bytes(dtype: str) -> int:
    """The bytes of one element of an HLO element type (4 for a type not known)."""
    return _DTYPE_BYTES.get(dtype, 4)


@dataclass(frozen=True)
class Shape:
    dtype: str
    dims: tuple[int, ...]
    layout: tuple[int, ...] | None  # minor-to-major

    @classmethod
    def parse(cls, text: str) -> Shape | None:
        match = _ARRAY_SHAPE.match(text)
        if not match:
            return None
        dims = tuple(int(d) for d in match["dims"].split(",") if d)
        layout = tuple(int(d) for d in match["layout"].split(",") if d) if match["layout"] is not None else None
        return cls(match["dtype"], dims, layout)

    @property
    def bytes(self) -> int:
        return math.prod(self.dims) * element_bytes(self.dtype)

    def __str__(self) -> str:
        layout = "{" + ",".join(map(str, self.layout)) + "}" if self.layout is not None else ""
        return f"{self.dtype}[{','.join(map(str, self.dims))}]{layout}"


@dataclass
class Instruction:
    name: str
    opcode: str
    shape: Shape | None
    operands: list[str]
    computation: str
    calls: str = ""
    dtype: str = ""  # of the result, or of a tuple result's first element
    kind: str = ""  # a fusion's kind: "Loop", "Input", "Output", "Custom"
    target: str = ""  # a custom call's target
    precision: str = ""  # a dot's or convolution's operand precision, where it is not the default ("highest")
    flops: float = 0.0  # a dot's or convolution's floating-point operations per run (a multiply-add is two)
    # A batched matmul's (one matmul per batch element: attention's, per head) rows, contracted size and columns.
    batched_mkn: tuple[int, int, int] | None = None
    # Any dot's or matmul-like convolution's rows, contracted size and columns, per batch element.
    matmul_mkn: tuple[int, int, int] | None = None
    tuple_index: int = -1  # a get-tuple-element's index
    parameter: int = -1  # a parameter's number
    direction: str = ""  # a compare's: "EQ", "LT", ...
    iota_dimension: int = 0  # an iota's: the dimension it counts along
    broadcast_dimensions: tuple[int, ...] = ()  # a broadcast's: the result's dimensions its operand's map to
    # A slice's elements over its operand's (what it keeps), a pad's operand's over its own (what is not zeros); 1
    # for other instructions.
    kept_share: float = 1.0
    window: str = ""  # a slice's ranges, as written: two slices of the same ranges read the same elements
    scalar: float | None = None  # a scalar constant's value


@dataclass
class HloModule:
    name: str
    entry: str = ""
    instructions: dict[str, Instruction] = field(default_factory=dict)
    computations: dict[str, list[str]] = field(default_factory=dict)  # computation -> its instructions
    runs_as: dict[str, str] = field(default_factory=dict)  # fused computation -> the fusion that runs it
    roots: dict[str, str] = field(default_factory=dict)  # computation -> its ROOT instruction
    applied: set[str] = field(default_factory=set)  # computations an op applies per element (a reduce's sum)
    fingerprint: str = ""  # of its text without the module's name: two compilations of the same program match
    donated: set[int] = field(default_factory=set)  # entry parameters whose buffers the outputs reuse
    _consumers: dict[str, list[Instruction]] | None = field(default=None, repr=False, compare=False)

    def operand(self, instruction: Instruction, index: int = 0) -> Instruction | None:
        if index >= len(instruction.operands):
            return None
        return self.instructions.get(instruction.operands[index])

    def consumers(self, name: str) -> list[Instruction]:
        """The instructions that take ``name`` as an operand, in program order (an index built on first use: a
        module is not changed once parsed)."""
        if self._consumers is None:
            self._consumers = {}
            for instruction in self.instructions.values():
                for operand in dict.fromkeys(instruction.operands):
                    self._consumers.setdefault(operand, []).append(instruction)
        return self._consumers.get(name, [])

    def executor(self, instruction: Instruction) -> str:
        """The entry-level instruction that runs this one: itself, or the fusion it is inside."""
        return self.runs_as.get(instruction.computation, instruction.name)

    def work(self) -> list[Instruction]:
        """The entry computation's instructions, with fusions replaced by what they compute."""
        found = []
        for name in self.computations.get(self.entry, []):
            instruction = self.instructions[name]
            if instruction.opcode == "fusion" and instruction.calls in self.computations:
                found.extend(self.instructions[n] for n in self.computations[instruction.calls])
            else:
                found.append(instruction)
        return [i for i in found if i.opcode not in ("parameter", "tuple", "get-tuple-element", "constant")]


def _balanced(text: str, start: int) -> int:
    """The index just past the bracket that closes the one at ``start``."""
    depth = 0
    for index in range(start, len(text)):
        if text[index] in "([{":
            depth += 1
        elif text[index] in ")]}":
            depth -= 1
            if depth == 0:
                return index + 1
    return len(text)


def parse_module(name: str, text: str) -> HloModule:
    module = HloModule(name)
    body = text.split("\n", 1)[1] if text.startswith("HloModule ") and "\n" in text else text
    module.fingerprint = hashlib.sha256(body.encode()).hexdigest()[:16]
    header = text.split("\n", 1)[0] if text.startswith("HloModule ") else ""
    if (aliases := header.find(_ALIASES)) >= 0:
        start = aliases + len(_ALIASES)
        module.donated = {int(n) for n in _ALIASED_PARAMETER.findall(header[start:_balanced(header, start)])}
    computation = ""
    for line in text.splitlines():
        header = _COMPUTATION.match(line)
        if header and " = " not in line.split("(", 1)[0]:
            computation = header["name"]
            module.computations[computation] = []
            if header["entry"]:
                module.entry = computation
            continue
        match = _INSTRUCTION.match(line)
        if not match or not computation:
            continue
        rest = match["rest"]
        shape_end = _balanced(rest, 0) if rest.startswith("(") else rest.find(" ")
        shape_text, after = rest[:shape_end], rest[shape_end:]
        opcode = _OPCODE.match(after)
        if not opcode:
            continue
        operands_end = _balanced(after, opcode.end() - 1)
        attributes = after[operands_end:]
        calls = _CALLS.search(attributes)
        kind = _FUSION_KIND.search(attributes)
        target = _TARGET.search(attributes)
        dtype = _DTYPE.match(shape_text)
        instruction = Instruction(
            name=match["name"],
            opcode=opcode["opcode"],
            shape=Shape.parse(shape_text),
            operands=_OPERAND.findall(after[opcode.end():operands_end]),
            computation=computation,
            calls=calls.group(1) if calls else "",
            dtype=dtype["dtype"] if dtype else "",
            kind=kind.group(1) if kind else "",
            target=target.group(1) if target else "",
        )
        if instruction.opcode == "constant" and instruction.shape is not None and not instruction.shape.dims:
            instruction.scalar = _number(after[opcode.end():operands_end - 1])
        if instruction.opcode == "parameter" and after[opcode.end():operands_end - 1].strip().isdigit():
            instruction.parameter = int(after[opcode.end():operands_end - 1])
        if instruction.opcode in ("dot", "convolution") or _MATMUL_TARGET.search(instruction.target):
            instruction.precision = _precision(attributes)
            instruction.flops = _matmul_flops(module, instruction, attributes)
            if (mkn := _matmul_mkn(module, instruction, attributes)) is not None:
                instruction.matmul_mkn, batched = mkn
                instruction.batched_mkn = instruction.matmul_mkn if batched else None
        elif instruction.opcode == "compare" and (direction := _DIRECTION.search(attributes)):
            instruction.direction = direction.group(1)
        elif instruction.opcode == "get-tuple-element" and (index := _TUPLE_INDEX.search(attributes)):
            instruction.tuple_index = int(index.group(1))
        elif instruction.opcode == "iota" and (dimension := _IOTA_DIMENSION.search(attributes)):
            instruction.iota_dimension = int(dimension.group(1))
        elif instruction.opcode == "broadcast" and (dimensions := _DIMENSIONS.search(attributes)):
            instruction.broadcast_dimensions = tuple(int(d) for d in dimensions.group(1).split(",") if d)
        elif instruction.opcode in ("slice", "pad"):
            instruction.kept_share = _kept_share(module, instruction)
            instruction.window = window.group(1) if (window := _SLICE_WINDOW.search(attributes)) else ""
        module.instructions[instruction.name] = instruction
        module.computations[computation].append(instruction.name)
        if match["root"]:
            module.roots[computation] = instruction.name
        if instruction.opcode == "fusion" and instruction.calls:
            module.runs_as[instruction.calls] = instruction.name
        module.applied.update(_TO_APPLY.findall(attributes))
    return module


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None  # a literal of another kind (true/false, a tuple, an array)


def _kept_share(module: HloModule, instruction: Instruction) -> float:
    """Of a slice's operand, the share of elements it keeps; of a pad's result, the share that is not padding."""
    source = module.operand(instruction)
    if instruction.shape is None or source is None or source.shape is None:
        return 1.0
    small, large = (instruction, source) if instruction.opcode == "slice" else (source, instruction)
    return _elements_over(small, large)


_PRECISION_ORDER = ("highest", "high")


def _precision(attributes: str) -> str:
    """The highest operand precision a dot or convolution asks for, or "" for the default."""
    match = _PRECISION.search(attributes)
    asked = {p.strip(' "').lower() for p in (match.group(1) or match.group(2)).split(",")} if match else set()
    return next((p for p in _PRECISION_ORDER if p in asked), "")


def _matmul_flops(module: HloModule, instruction: Instruction, attributes: str) -> float:
    """2 x the multiply-adds of a dot (result size x contracted size) or a convolution (result size x the kernel's
    size per output feature); 0 where the shapes are not known."""
    lhs, rhs = (module.operand(instruction, i) for i in (0, 1))
    if instruction.shape is None or lhs is None or rhs is None or lhs.shape is None or rhs.shape is None:
        return 0.0
    results = math.prod(instruction.shape.dims)
    if instruction.opcode == "dot":
        contracting = _CONTRACTING.search(attributes)
        dims = [int(d) for d in contracting.group(1).split(",") if d] if contracting else []
        if any(d >= len(lhs.shape.dims) for d in dims):
            return 0.0
        return 2.0 * results * math.prod(lhs.shape.dims[d] for d in dims)
    labels = _KERNEL_LABELS.search(attributes)
    if labels is None or "o" not in labels.group(1) or len(labels.group(1)) != len(rhs.shape.dims):
        return 0.0
    # The kernel holds (input features / groups) x window per output feature, whatever the group count.
    kernel = labels.group(1)
    output_features = rhs.shape.dims[kernel.index("o")]
    per_output = math.prod(rhs.shape.dims) / max(output_features, 1)
    # A dilated input (lhs_dilate, as XLA writes a batched matmul on TPU) puts zeros between its elements: a window
    # of size w meets ceil(w / d) of them, the only taps that multiply anything.
    sizes, dilations = _WINDOW_SIZE.search(attributes), _LHS_DILATE.search(attributes)
    if sizes and dilations:
        for size, dilation in zip(sizes.group(1).split("x"), dilations.group(1).split("x")):
            per_output *= math.ceil(int(size) / max(int(dilation), 1)) / max(int(size), 1)
    return 2.0 * results * per_output


def _matmul_mkn(module: HloModule, instruction: Instruction,
                attributes: str) -> tuple[tuple[int, int, int], bool] | None:
    """The rows, contracted size and columns of each matmul a dot or convolution makes, and whether it makes one per
    batch element: a dot, the convolution a TPU compiler makes of a batched matmul, or a convolution by a 1 x 1
    kernel (a matmul whose rows are the batch and spatial positions); None for another convolution."""
    lhs, rhs = (module.operand(instruction, i) for i in (0, 1))
    if lhs is None or rhs is None or lhs.shape is None or rhs.shape is None:
        return None
    if instruction.opcode == "dot":
        axes = {name: [int(d) for d in found.split(",") if d] for name, found in _DOT_DIMS.findall(attributes)}
        sides = {"lhs": lhs.shape.dims, "rhs": rhs.shape.dims}
        if any(axis >= len(sides[name[:3]]) for name, listed in axes.items() for axis in listed):
            return None
        free = [math.prod(size for axis, size in enumerate(sides[side])
                          if axis not in axes.get(f"{side}_batch", []) + axes.get(f"{side}_contracting", []))
                for side in ("lhs", "rhs")]
        contracted = math.prod(sides["lhs"][axis] for axis in axes.get("lhs_contracting", []))
        return (free[0], contracted, free[1]), bool(axes.get("lhs_batch"))
    labels, sizes = _ALL_LABELS.search(attributes), _WINDOW_SIZE.search(attributes)
    if labels is None or instruction.shape is None:
        return None
    inputs, kernel, output = labels.groups()
    if (len(inputs) != len(lhs.shape.dims) or len(kernel) != len(rhs.shape.dims)
            or not {"b", "f"} <= set(inputs) or not {"i", "o"} <= set(kernel)):
        return None
    rows, contracted, columns = (lhs.shape.dims[inputs.index("b")], lhs.shape.dims[inputs.index("f")],
                                 rhs.shape.dims[kernel.index("o")])
    if _LHS_DILATE.search(attributes):
        # The batch dimensions are windows as large as themselves, one output each; a transposed convolution (also
        # an input dilated) makes outputs far more than its window.
        spatial = [instruction.shape.dims[at] for at, label in enumerate(output) if label.isdigit()
                   and at < len(instruction.shape.dims)]
        if sizes is None or spatial != [int(size) for size in sizes.group(1).split("x")]:
            return None
        return (rows, contracted, columns), True
    pointwise = sizes is None or all(size == "1" for size in sizes.group(1).split("x"))
    if not pointwise or _GROUPED.search(attributes) or math.prod(rhs.shape.dims) != contracted * columns:
        return None
    return (math.prod(lhs.shape.dims) // max(contracted, 1), contracted, columns), False


def load_modules(names: Iterable[str], text_of: Callable[[str], str]) -> list[HloModule]:
    """Parse up to ``MAX_MODULES`` modules; one that cannot be printed is skipped."""
    modules = []
    for name in sorted(names)[:MAX_MODULES]:
        try:
            modules.append(parse_module(name, text_of(name)))
        except ValueError:
            continue
    return modules


def _issue(module: HloModule, instruction: Instruction, detail: str, *shapes: Shape | None) -> HloIssue:
    return HloIssue(
        module=module.name,
        instruction=instruction.name,
        runs_as=module.executor(instruction),
        detail=detail,
        shapes=[str(s) for s in shapes if s is not None],
    )


def _is_in_fusion(module: HloModule, instruction: Instruction) -> bool:
    return instruction.computation in module.runs_as


def detect_layout_mismatch_copies(modules: list[HloModule]) -> list[HloIssue]:
    """Copies that keep the dimensions and only change the layout: a transpose in memory."""
    issues = []
    for module in modules:
        for instruction in module.instructions.values():
            source = module.operand(instruction)
            if instruction.opcode != "copy" or source is None or not instruction.shape or not source.shape:
                continue
            before, after = source.shape, instruction.shape
            if before.dims == after.dims and before.layout is not None and before.layout != after.layout:
                issues.append(_issue(
                    module, instruction,
                    f"copy rewrites {after} from layout {{{','.join(map(str, before.layout))}}}"
                    f" ({after.bytes / 1024:.0f} KiB moved each run)",
                    before, after,
                ))
    return issues[:MAX_ISSUES]


def _only_moves_data(module: HloModule) -> bool:
    work = module.work()
    return (
        bool(work)
        and all(i.opcode in _SHAPE_ONLY for i in work)
        and any(i.opcode in ("reshape", "transpose") or (i.opcode == "bitcast" and module.consumers(i.name))
                for i in work)
        and max((i.shape.bytes for i in work if i.shape), default=0) >= MIN_PROGRAM_BYTES
    )


def detect_unfused_reshapes(modules: list[HloModule]) -> list[HloIssue]:
    """Reshapes and transposes that run as a kernel or a whole program of their own."""
    issues = []
    for module in modules:
        if _only_moves_data(module):
            moved = [i for i in module.work() if i.opcode in _DATA_MOVES and i.shape is not None]
            last = moved[-1]
            source = module.operand(moved[0])
            issues.append(_issue(
                module, last,
                f"the whole program only reshapes or transposes its input to {last.shape}: dispatched on its"
                " own it costs a launch and a full copy that fusing into the consumer (under one jit) avoids",
                source.shape if source else None, last.shape,
            ))
            continue
        for instruction in module.instructions.values():
            if instruction.opcode not in ("reshape", "transpose") or _is_in_fusion(module, instruction):
                continue
            if instruction.computation != module.entry:
                continue
            source = module.operand(instruction)
            issues.append(_issue(
                module, instruction,
                f"{instruction.opcode} runs as its own kernel, materialising {instruction.shape}",
                source.shape if source else None, instruction.shape,
            ))
    return issues[:MAX_ISSUES]


def _convert_program(module: HloModule) -> Instruction | None:
    work = module.work()
    if len(work) != 1 or work[0].opcode != "convert" or not work[0].shape:
        return None
    return work[0] if work[0].shape.bytes >= MIN_PROGRAM_BYTES else None


def detect_unnecessary_convert_reduce(modules: list[HloModule]) -> list[HloIssue]:
    """Dtype round trips, converts materialised only to be reduced, and programs that only convert."""
    issues = []
    standalone: dict[tuple[str, str, tuple[int, ...]], tuple[HloModule, Instruction]] = {}
    for module in modules:
        for instruction in module.instructions.values():
            if instruction.opcode != "convert" or instruction.shape is None:
                continue
            source = module.operand(instruction)
            origin = module.operand(source) if source is not None and source.opcode == "convert" else None
            if origin is not None and origin.shape and origin.shape.dtype == instruction.shape.dtype:
                issues.append(_issue(
                    module, instruction,
                    f"{origin.shape.dtype} -> {source.shape.dtype if source.shape else '?'} -> "
                    f"{instruction.shape.dtype} round trip: it only loses precision",
                    origin.shape, instruction.shape,
                ))
            users = module.consumers(instruction.name)
            if (users and all(u.opcode == "reduce" for u in users) and not _is_in_fusion(module, instruction)
                    and source is not None and source.shape):
                issues.append(_issue(
                    module, instruction,
                    f"a full {instruction.shape} copy is converted from {source.shape.dtype} only to be reduced;"
                    " fused into the reduce, the conversion would happen on the fly",
                    source.shape, instruction.shape,
                ))
        convert = _convert_program(module)
        source = module.operand(convert) if convert is not None else None
        if convert is not None and convert.shape and source is not None and source.shape:
            standalone[(source.shape.dtype, convert.shape.dtype, convert.shape.dims)] = (module, convert)
    for (from_dtype, to_dtype, dims), (module, convert) in sorted(standalone.items()):
        back = standalone.get((to_dtype, from_dtype, dims))
        detail = f"the whole program converts {from_dtype} to {to_dtype} of shape [{','.join(map(str, dims))}]"
        if back is not None:
            detail += f", and {back[0].name} converts it back: an op-by-op round trip"
        issues.append(_issue(module, convert, detail, module.operand(convert).shape, convert.shape))
    return issues[:MAX_ISSUES]


_NOT_A_BUFFER = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})


def _updated_operand(module: HloModule, instruction: Instruction) -> Instruction | None:
    """The operand whose buffer ``instruction`` updates in place (a dynamic-update-slice's or scatter's first; a
    fusion's whose fused update writes into a fused parameter of the fusion's own shape), None for other work."""
    if instruction.opcode in _IN_PLACE_UPDATES:
        return module.operand(instruction)
    if instruction.opcode != "fusion" or instruction.shape is None:
        return None
    for name in module.computations.get(instruction.calls, []):
        update = module.instructions[name]
        source = module.operand(update) if update.opcode in _IN_PLACE_UPDATES else None
        while source is not None and source.opcode in _PASSES_THROUGH:
            source = module.operand(source)
        if (source is not None and source.opcode == "parameter" and source.shape is not None
                and source.shape.dims == instruction.shape.dims):
            return module.operand(instruction, source.parameter)
    return None


def undonated_updates(module: HloModule) -> dict[str, list[str]]:
    """The entry parameters of at least ``MIN_UNDONATED_BYTES`` that the program updates in place into one of its
    outputs without their buffers being donated: each call then copies the whole buffer before updating it (a
    KV cache written one token at a time, a replay buffer). Each parameter's name -> the instructions that run
    its updates, in program order."""
    root = module.instructions.get(module.roots.get(module.entry, ""))
    if root is None:
        return {}
    outputs = [module.instructions[n] for n in root.operands if n in module.instructions] \
        if root.opcode == "tuple" else [root]
    found = {}
    for output in outputs:
        writers, current = [], output
        while (source := _updated_operand(module, current)) is not None:
            writers.append(current.name)
            current = source
        if (writers and current.opcode == "parameter" and current.computation == module.entry
                and current.parameter not in module.donated and current.shape is not None
                and current.shape.bytes >= MIN_UNDONATED_BYTES):
            found[current.name] = writers[::-1]
    return found


def program_buffers(modules: list[HloModule]) -> list[HloProgram]:
    """Each module's parameters, results (the ROOT, or a ROOT tuple's elements), constants, largest intermediate
    and computing fusions."""
    found = []
    for module in modules:
        entry = [module.instructions[name] for name in module.computations.get(module.entry, [])]
        root = module.instructions.get(module.roots.get(module.entry, ""))
        if not entry or root is None:
            continue
        outputs = [module.instructions[n] for n in root.operands if n in module.instructions] \
            if root.opcode == "tuple" else [root]
        inputs = [i for i in entry if i.opcode == "parameter"]
        results = {i.name for i in outputs}
        temporaries = [i for i in entry if i.opcode not in _NOT_A_BUFFER and i.name not in results and i.shape]
        largest = max(temporaries, key=lambda i: i.shape.bytes, default=None)
        found.append(HloProgram(
            module=module.name,
            inputs_bytes=sum(i.shape.bytes for i in inputs if i.shape),
            outputs_bytes=sum(i.shape.bytes for i in outputs if i.shape),
            constants_bytes=sum(i.shape.bytes for i in entry if i.opcode == "constant" and i.shape),
            largest_temporary=largest.name if largest else "",
            largest_temporary_bytes=largest.shape.bytes if largest else 0,
            parameters={i.name: str(i.shape) if i.shape else "?" for i in inputs},
            fingerprint=module.fingerprint,
            computing_fusions=[i.name for i in _kernels(module) if i.opcode == "fusion" and any(
                module.instructions[n].opcode not in _MOVES_OR_RETYPES for n in module.computations.get(i.calls, []))],
            undonated=undonated_updates(module),
        ))
    return found


def _kernels(module: HloModule) -> list[Instruction]:
    """The instructions that run as kernels: those of the entry computation and of the computations it runs in
    turn (a while loop's body, a call's, a conditional's branches), not the insides of fusions or the functions an
    op applies per element."""
    inside = {i.calls for i in module.instructions.values() if i.opcode == "fusion"} | module.applied
    return [module.instructions[name] for computation, names in module.computations.items()
            if computation not in inside for name in names]


# Ops that are not element-wise math: they give a kernel its kind of work.
_STRUCTURED = {"convolution": "convolution", "dot": "matmul", "reduce": "reduction", "reduce-window": "reduction"}
_NOT_ELEMENTWISE = frozenset({
    *_STRUCTURED, "scatter", "gather", "sort", "select-and-scatter", "dynamic-update-slice", "iota", "rng",
    "rng-bit-generator", "fft", "triangular-solve", "cholesky", "all-reduce", "all-gather", "reduce-scatter",
    "all-to-all", "collective-permute", "copy-start", "copy-done", "send", "recv", "infeed", "outfeed", "while",
    "conditional", "call", "custom-call",
})
MAX_OPS_NAMED = 8


@dataclass(frozen=True)
class KernelWork:
    """What one kernel of a program computes: an instruction outside fusions (a fusion, a custom call, an op)."""

    module: str
    instruction: str
    ops: tuple[str, ...]  # its opcodes, nested fusions included, in program order: those that compute, where any do
    dtype: str  # the dtype those ops compute in
    io_dtype: str  # the dtype it returns
    computes: bool = True  # whether any op is math rather than moving or re-typing data
    converts: str = ""  # "between": its inputs are converted to ``dtype`` and its result back; "after": the result only
    root: str = ""  # a fusion's root opcode, which XLA names the fusion after; "" for an instruction of its own
    custom_call: str = ""  # a custom call's target
    dtypes: tuple[str, ...] = ()  # every dtype its math computes in
    matmul_dtype: str = ""  # the operands' dtype of its dots and convolutions (the widest); "" without any
    precision: str = ""  # the highest operand precision its dots and convolutions ask for; "" for the default
    flops: float = 0.0  # its dots' and convolutions' floating-point operations per run
    updates_per_element: float = 0.0  # its scatters' updates over the elements they update (the most of any)
    one_hot_classes: int = 0  # the classes of a one-hot matrix its dots multiply, or it makes for them (the widest)
    copies_argument: bool = False  # a copy of an entry parameter into a buffer of the same shape and layout
    # The narrowest rows, contracted size or columns of its batched matmuls (attention's per-head dims); 0 without.
    matmul_width: int = 0
    largest_elements: int = 0  # elements of the largest array it reads or writes
    bytes_accessed: int = 0  # the arrays it reads and writes, each once: the least memory traffic one run makes
    # The shape of the array its scatters add into that starts as a constant (zeros): a gather's gradient, an
    # embedding table's, made as large as the table; () without.
    scatters_into_constant: tuple[int, ...] = ()
    # A fusion that writes a window of another array into a buffer that many such windows fill side by side (an
    # im2col or unfold, a convolution written by hand): how many windows fit along the buffer's widened dimension.
    windows_side_by_side: int = 0
    # The elements it computes (or works on) per one the program reads: a matmul's or convolution's result of which
    # slices keep one in N (y[:, ::2, ::2], logits[:, -1]), its copies and the kernels that pick the kept elements
    # out of it, or, for its gradient, the zeros put around or between the kept elements' gradients and the matmuls
    # that read them; 1 otherwise.
    computed_per_kept: int = 1
    # Of a program that writes one position of a buffer per call and computes it from one row of activations it
    # computes at every position (decoding without a key/value cache): the positions this kernel works on, where
    # its result spans them all; 0 otherwise.
    recomputed_positions: int = 0
    # A matmul chain multiplied in its costly order whose intermediate (or an array as large) the kernel makes or reads.
    costly_chain: MatmulChain | None = None
    # Matmuls by a triangular matrix of ones (a running sum written as ``tril(ones) @ x``), or kernels that make or
    # read that matrix: the positions summed over; 0 otherwise.
    running_sum_positions: int = 0
    # A matmul whose result a mask of positions mostly discards (a sliding window's band over full attention
    # scores), or a kernel joined to it by arrays of that size: one element kept in N; 0 otherwise.
    masked_per_kept: int = 0
    # Matmuls by a Kronecker product made in full (``x @ jnp.kron(a, b)``), or kernels that make or read arrays of
    # its size: the factors' shapes (p, q, r, s); () otherwise.
    kronecker_factors: tuple[int, ...] = ()
    # Every row of one matrix combined with every row of another feature by feature, an [n, m, d] elementwise
    # computation (pairwise distances by broadcasting): (n, m, d); () otherwise.
    pairs_combined: tuple[int, ...] = ()
    # Batched matmuls that multiply each batch element by its own copy of one matrix, broadcast along the batch
    # (a vmap that batched the weights): the copies, where the kernel runs such matmuls or makes or reads an array
    # of the copies' size (the broadcast itself, the per-example weight gradients).
    shared_matrix_copies: SharedMatrixCopies | None = None
    # Kernels of a Jacobian built in full: matmuls seeding derivatives by an n x n identity (``jax.jacrev`` and
    # ``jax.jacfwd`` push its rows through the program) and every kernel computing on their results: n; 0 otherwise.
    jacobian_basis: int = 0
    # Work a constant zero throws away (an auxiliary loss weighted 0.0): 1.0 for a kernel whose result only feeds
    # products with zero, else the share of its matmul FLOPs that multiply an all-zero operand; 0 otherwise.
    zeroed_share: float = 0.0


def _fused(module: HloModule, computation: str) -> list[Instruction]:
    """A fused computation's instructions, those of the fusions nested in it included."""
    found = []
    for name in module.computations.get(computation, []):
        instruction = module.instructions[name]
        if instruction.opcode == "fusion" and instruction.calls in module.computations:
            found += _fused(module, instruction.calls)
        else:
            found.append(instruction)
    return found


_WIDTH = ("f64", "f32", "bf16", "f16")
_MATMUL_TARGET = re.compile(r"gemm|matmul|conv", re.IGNORECASE)  # library matmuls and convolutions (cuBLAS, cuDNN)


def _dft_matrix(module: HloModule, values: Instruction | None) -> bool:
    """Whether ``values`` is a discrete Fourier transform's matrix the compiler builds for an FFT: made from nothing
    but an iota's cosines or sines (a TPU computes ``jnp.fft`` as matmuls by such matrices, at HIGHEST precision)."""
    while values is not None and values.opcode in _PASSES_VALUES:
        values = module.operand(values)
    if values is None or values.opcode != "fusion" or values.calls not in module.computations:
        return False
    body = {i.opcode for i in _fused(module, values.calls)}
    return not values.operands and "iota" in body and bool(body & {"cosine", "sine"})


def _matmul_fields(module: HloModule, ops: list[Instruction]) -> dict:
    """What a kernel's dots and convolutions take and cost: their operands' widest dtype, precision (that of a
    compiler's FFT, a matmul by a DFT matrix, set apart) and FLOPs."""
    matmuls = [i for i in ops if i.opcode in ("dot", "convolution") or _MATMUL_TARGET.search(i.target)]
    operands = {o.dtype for i in matmuls for o in (module.operand(i, 0), module.operand(i, 1)) if o is not None}
    asked = [i for i in matmuls if not any(_dft_matrix(module, module.operand(i, side)) for side in (0, 1))]
    return {
        "matmul_dtype": next((d for d in _WIDTH if d in operands), min(operands, default="")),
        "precision": next((p for p in _PRECISION_ORDER if any(i.precision == p for i in asked)), ""),
        "flops": sum((i.flops for i in matmuls), 0.0),
    }


def _updates_per_element(module: HloModule, ops: list[Instruction]) -> float:
    """How many updates a kernel's scatters apply to each element of what they update: 256 where 262,144 rows are
    summed into 1,024 segments, under 1 where an embedding's gradient rows go into a large table."""
    ratios = [0.0]
    for scatter in (i for i in ops if i.opcode == "scatter"):
        target, updates = module.operand(scatter, 0), module.operand(scatter, len(scatter.operands) - 1)
        if target is not None and updates is not None and target.shape and updates.shape:
            ratios.append(math.prod(updates.shape.dims) / max(math.prod(target.shape.dims), 1))
    return max(ratios)


_PASSES_VALUES = frozenset({"convert", "bitcast", "broadcast", "reshape", "copy", "transpose", "copy-start",
                            "copy-done"})


def _origin(module: HloModule, instruction: Instruction | None,
            passes: frozenset[str] = _PASSES_VALUES) -> Instruction | None:
    """Where an operand's values come from: past converts, broadcasts and reshapes (``passes``), into a fusion's
    root, out of a fused computation's parameter to what the fusion was given, and to the predicate of a select
    between constants."""
    for _ in range(64):  # a chain of value-preserving ops is short; the bound guards a malformed module
        if instruction is None:
            return None
        if instruction.opcode in passes:
            instruction = module.operand(instruction)
        elif instruction.opcode == "parameter" and instruction.computation in module.runs_as:
            fusion = module.instructions.get(module.runs_as[instruction.computation])
            instruction = module.operand(fusion, instruction.parameter) if fusion is not None else None
        elif instruction.opcode == "fusion" and instruction.calls in module.roots:
            instruction = module.instructions.get(module.roots[instruction.calls])
        elif instruction.opcode == "select" and all(
                (branch := module.operand(instruction, index)) is not None
                and branch.opcode in ("constant", "broadcast") for index in (1, 2)):
            instruction = module.operand(instruction)
        else:
            return instruction
    return None


def _identity_size(module: HloModule, values: Instruction | None) -> int:
    """The size of the identity matrix ``values`` holds (``iota == iota``, one-hot over positions, as
    ``conv_general_dilated_patches`` builds its kernel); 0 where it holds none."""
    compare = _origin(module, values)
    if compare is None or compare.opcode != "compare" or compare.direction != "EQ":
        return 0
    sides = [_origin(module, module.operand(compare, side)) for side in (0, 1)]
    if not all(side is not None and side.opcode == "iota" and side.shape for side in sides):
        return 0
    return sides[0].shape.dims[sides[0].iota_dimension] if sides[0].iota_dimension < len(sides[0].shape.dims) else 0


_TRIANGLE = frozenset({"GE", "GT", "LE", "LT"})
MIN_SUMMED = 64  # positions from which a running sum by a triangular matmul costs many times a cumulative sum


def _triangle_size(module: HloModule, values: Instruction | None) -> int:
    """The size of the triangular matrix of ones ``values`` holds (``iota >= iota`` along its two dimensions,
    ``jnp.tril(jnp.ones((n, n)))``), a running sum's as a matmul; 0 where it holds none."""
    compare = _origin(module, values)
    if compare is None or compare.opcode != "compare" or compare.direction not in _TRIANGLE:
        return 0
    sides = [_origin(module, module.operand(compare, side)) for side in (0, 1)]
    if not all(side is not None and side.opcode == "iota" and side.shape and len(side.shape.dims) == 2
               for side in sides) or sides[0].iota_dimension == sides[1].iota_dimension:
        return 0
    rows, columns = sides[0].shape.dims
    return rows if rows == columns else 0


MIN_PAIRS = 1 << 16  # pairs from which combining every pair feature by feature is worth a finding
_PAIRWISE = frozenset({"subtract", "add"})


def _pairs_combined(module: HloModule, instruction: Instruction) -> tuple[int, int, int] | None:
    """Where ``instruction`` combines two matrices row by row, every row of one with every row of the other,
    feature by feature: the difference (or sum) of an [n, d] and an [m, d] array broadcast to [n, m, d] along
    different dimensions (``a[:, None, :] - b[None, :, :]``), as pairwise distances by broadcasting compute;
    (n, m, d)."""
    if instruction.opcode not in _PAIRWISE or instruction.shape is None or len(instruction.shape.dims) != 3:
        return None
    kept = []
    for side in (0, 1):
        broadcast = module.operand(instruction, side)
        while broadcast is not None and broadcast.opcode in ("convert", "bitcast", "copy"):
            broadcast = module.operand(broadcast)
        if broadcast is None or broadcast.opcode != "broadcast" or (source := module.operand(broadcast)) is None:
            return None
        if source.shape is None or len(source.shape.dims) != 2:
            return None
        kept.append(set(broadcast.broadcast_dimensions))
    shared = kept[0] & kept[1]
    if len(shared) != 1 or len(kept[0] | kept[1]) != 3:
        return None
    features = shared.pop()
    n, m = (instruction.shape.dims[next(iter(dims - {features}))] for dims in kept)
    return (n, m, instruction.shape.dims[features]) if n * m >= MIN_PAIRS else None


def _pairwise_kernels(module: HloModule) -> dict[str, tuple[int, int, int]]:
    """The entry-level kernels that combine every pair of two matrices' rows feature by feature
    (:func:`_pairs_combined`), and those joined to them by arrays of the [n, m, d] size (the squares and sums of a
    difference materialised by one kernel and read by others): kernel -> (n, m, d)."""
    found: dict[str, tuple[int, int, int]] = {}
    for instruction in module.instructions.values():
        if (pairs := _pairs_combined(module, instruction)) is not None:
            found.setdefault(_outermost(module, instruction).name, pairs)
    for pairs in set(found.values()):
        joined = _joined_by_arrays(module, math.prod(pairs))
        for kernel in _reached(joined, {name for name, seen in found.items() if seen == pairs}):
            found.setdefault(kernel, pairs)
    return found


def _kronecker_factors(module: HloModule, values: Instruction | None) -> tuple[int, ...]:
    """The two factors' shapes, (p, q, r, s), where ``values`` is the Kronecker product of a [p, q] and an [r, s]
    matrix (``jnp.kron(a, b)``: their broadcasts to [p, r, q, s] multiplied); () where it is not one."""
    product = _origin(module, values, passes=_PASSES_VALUES - {"broadcast"})
    if product is None or product.opcode != "multiply" or product.shape is None or len(product.shape.dims) != 4:
        return ()
    factors: dict[tuple[int, ...], tuple[int, ...]] = {}
    for side in (0, 1):
        broadcast = _broadcast_source(module, module.operand(product, side))
        source = module.operand(broadcast) if broadcast is not None else None
        if source is None or source.shape is None or len(source.shape.dims) != 2:
            return ()
        factors[tuple(sorted(broadcast.broadcast_dimensions))] = source.shape.dims
    if set(factors) != {(0, 2), (1, 3)}:
        return ()
    (p, q), (r, s) = factors[(0, 2)], factors[(1, 3)]
    return (p, q, r, s) if min(p, q, r, s) > 1 else ()


def _kronecker_products(module: HloModule) -> dict[str, tuple[int, ...]]:
    """The kernels of matmuls by a Kronecker product made in full (``x @ jnp.kron(a, b)``), and, where no array the
    program is given is as large as the product (an activation of that size would join the whole model), those
    joined to them by arrays of its size (the kernel that makes it) and the matmuls that make an array of its size
    (its gradient): kernel -> (p, q, r, s)."""
    found: dict[str, tuple[int, ...]] = {}
    for product in module.instructions.values():
        if product.opcode not in ("dot", "convolution"):
            continue
        if factors := next(filter(None, (_kronecker_factors(module, module.operand(product, side))
                                         for side in (0, 1))), ()):
            found[_outermost(module, product).name] = factors
    given = {math.prod(i.shape.dims) for name in module.computations.get(module.entry, [])
             if (i := module.instructions[name]).opcode == "parameter" and i.shape is not None}
    for factors in set(found.values()) - {f for f in set(found.values()) if math.prod(f) in given}:
        joined = _joined_by_arrays(module, math.prod(factors))
        for kernel in _reached(joined, {name for name, seen in found.items() if seen == factors}):
            found.setdefault(kernel, factors)
        for name in module.computations.get(module.entry, []):
            if any(i.opcode in ("dot", "convolution") and i.shape is not None
                   and math.prod(i.shape.dims) == math.prod(factors) for i in _body(module, module.instructions[name])):
                found.setdefault(name, factors)
    return found


MASK_SAMPLES = 97  # positions sampled along each dimension of a mask but the last to measure what it keeps
MASK_ROW_SAMPLES = 16384  # along its last: all of a row up to this many, so that a row's count is exact
MAX_MASKED_KEPT = 0.25  # of a matmul's result, the share a mask keeps below which most of it is computed to be dropped
# HLO's elementwise ops on positions, by the numpy function that computes each; XLA's integer division and
# remainder truncate towards zero, as C's do (numpy's fix of the quotient, and fmod).
_POSITION_ELEMENTWISE = {
    "add": "add", "subtract": "subtract", "multiply": "multiply", "and": "bitwise_and", "or": "bitwise_or",
    "maximum": "maximum", "minimum": "minimum", "shift-left": "left_shift", "shift-right-arithmetic": "right_shift",
    "shift-right-logical": "right_shift", "divide": "true_divide", "remainder": "fmod",
    "negate": "negative", "abs": "absolute", "sign": "sign", "not": "logical_not",
}
_MASK_COMPARE = {"EQ": operator.eq, "NE": operator.ne, "LT": operator.lt, "LE": operator.le, "GT": operator.gt,
                 "GE": operator.ge}


_POSITION_OPS = frozenset({"iota", "constant", "broadcast", "convert", "copy", "copy-done", "get-tuple-element",
                           "parameter", "fusion", "bitcast", "reshape", "compare", "select", *_POSITION_ELEMENTWISE})
MAX_MASK_OPS = 128  # a mask of positions is a handful of ops; a longer computation (a random hash) is not one


def _position_values(module: HloModule, instruction: Instruction | None, at: list,
                     budget: list[int] | None = None) -> object:
    """The values of a computation of positions alone (iotas, scalar constants, their broadcasts, arithmetic,
    comparisons, and/or) at the sampled positions ``at`` (one index array per dimension); None for anything that
    depends on data, or that takes more than ``MAX_MASK_OPS`` ops to evaluate."""
    import numpy as np

    budget = [MAX_MASK_OPS] if budget is None else budget
    budget[0] -= 1
    if (instruction is None or budget[0] < 0 or instruction.opcode not in _POSITION_OPS
            or instruction.shape is None or len(at) != len(instruction.shape.dims)):
        return None
    opcode, operand = instruction.opcode, module.operand(instruction)
    if opcode == "iota":
        return at[instruction.iota_dimension] if instruction.iota_dimension < len(at) else None
    if opcode == "constant":
        if instruction.scalar is None:
            return None
        integral = instruction.dtype.startswith(("s", "u")) or instruction.dtype == "pred"
        return np.asarray(int(instruction.scalar) if integral else instruction.scalar)
    if opcode == "broadcast" and operand is not None and operand.shape is not None:
        return _position_values(module, operand, [at[d] for d in instruction.broadcast_dimensions
                                                  if d < len(at)], budget)
    if opcode in ("convert", "copy") or (opcode == "parameter" and instruction.computation in module.runs_as):
        if opcode == "parameter":
            fusion = module.instructions.get(module.runs_as[instruction.computation])
            operand = module.operand(fusion, instruction.parameter) if fusion is not None else None
        return _position_values(module, operand, at, budget)
    if opcode == "copy-done":  # an asynchronous copy (to another memory space): the copy-start's operand's values
        return _position_values(module, module.operand(operand) if operand is not None else None, at, budget)
    if opcode == "get-tuple-element":  # one result of a fusion that makes several (a mask and its complement)
        root = (module.instructions.get(module.roots.get(operand.calls, ""))
                if operand is not None and operand.opcode == "fusion" else None)
        if root is None or root.opcode != "tuple":
            return None
        return _position_values(module, module.operand(root, instruction.tuple_index), at, budget)
    if opcode == "fusion" and instruction.calls in module.roots:
        return _position_values(module, module.instructions.get(module.roots[instruction.calls]), at, budget)
    if opcode in ("bitcast", "reshape") and operand is not None and operand.shape and instruction.shape:
        kept = [index for index, size in zip(at, instruction.shape.dims) if size != 1]
        if [size for size in operand.shape.dims if size != 1] != [s for s in instruction.shape.dims if s != 1]:
            return None
        kept_iter = iter(kept)
        return _position_values(module, operand, [np.zeros(1, dtype=np.int64) if size == 1 else next(kept_iter)
                                                  for size in operand.shape.dims], budget)
    sides = []
    for index in range(len(instruction.operands)):
        if (side := _position_values(module, module.operand(instruction, index), at, budget)) is None:
            return None
        sides.append(side)
    if opcode == "compare" and len(sides) == 2 and instruction.direction in _MASK_COMPARE:
        return _MASK_COMPARE[instruction.direction](*sides)
    if opcode == "select" and len(sides) == 3:
        return np.where(np.asarray(sides[0], dtype=bool), sides[1], sides[2])
    if opcode in ("divide", "remainder") and np.any(np.asarray(sides[-1]) == 0):
        return None
    if opcode == "shift-right-logical" and np.any(np.asarray(sides[0]) < 0):  # arithmetic only where they agree
        return None
    try:
        value = getattr(np, _POSITION_ELEMENTWISE[opcode])(*sides)
    except (KeyError, TypeError, ValueError):  # operands that do not broadcast, or a float and a bitwise op
        return None
    if opcode == "divide" and all(np.issubdtype(np.asarray(side).dtype, np.integer) for side in sides):
        return np.fix(value).astype(np.int64)
    return value


def _mask_kept_share(module: HloModule, predicate: Instruction | None) -> float | None:
    """The share of positions a mask made from positions alone keeps (``(j <= i) & (j > i - w)``: a band), measured
    on whole rows at ``MASK_SAMPLES`` evenly spread positions along each other dimension; None for a mask that
    depends on data."""
    import numpy as np

    if predicate is None or predicate.shape is None or not predicate.shape.dims:
        return None
    *outer, row = predicate.shape.dims
    axes = [np.unique(np.linspace(0, size - 1, min(size, samples)).astype(np.int64))
            for size, samples in [*((size, MASK_SAMPLES) for size in outer), (row, MASK_ROW_SAMPLES)]]
    grid = np.meshgrid(*axes, indexing="ij", sparse=True)
    values = _position_values(module, predicate, list(grid))
    if values is None:
        return None
    return float(np.mean(np.broadcast_to(np.asarray(values, dtype=bool), tuple(len(a) for a in axes))))


def _masked_by_positions(module: HloModule, masking: Instruction) -> tuple[Instruction, Instruction] | None:
    """A matmul's result and the mask ``masking`` applies to it: a select between the result and a constant on a
    predicate, or a product of the result and a float mask (``scores * band``); None for any other instruction."""
    if masking.shape is None:
        return None
    if masking.opcode == "select":
        result, mask = module.operand(masking, 1), module.operand(masking)
        return (result, mask) if result is not None and mask is not None and _made_by_matmul(module, result) else None
    if masking.opcode == "multiply":
        sides = [module.operand(masking, index) for index in (0, 1)]
        for result, mask in (sides, sides[::-1]):
            if result is not None and mask is not None and _made_by_matmul(module, result) \
                    and not _made_by_matmul(module, mask):
                return result, mask
    return None


def _masked_results(module: HloModule) -> dict[str, int]:
    """The kernels of matmuls whose result a mask of positions mostly discards (a select, or a product with a float
    mask, keeping at most ``MAX_MASKED_KEPT`` of it, as a sliding window's band keeps w of n keys), and those joined
    to them by arrays of the result's size (the softmax, the gradient's): kernel -> N, one element kept in N."""
    found: dict[str, int] = {}
    sizes: dict[int, int] = {}
    for masking in module.instructions.values():
        if (masked := _masked_by_positions(module, masking)) is None:
            continue
        result, mask = masked
        kept = _mask_kept_share(module, mask)
        # A diagonal (one element a row: a grouped convolution's weights picked from a dense product) is a layout of
        # the work, not a band of it.
        if kept is None or not 0 < kept <= MAX_MASKED_KEPT or kept * masking.shape.dims[-1] < 2:
            continue
        per_kept = int(1 / kept)
        source = _origin(module, result)
        runner = _entry_level(module, source) if source is not None else None
        for kernel in filter(None, (runner, _entry_level(module, masking))):
            found[kernel.name] = max(found.get(kernel.name, 0), per_kept)
        sizes[math.prod(masking.shape.dims)] = max(sizes.get(math.prod(masking.shape.dims), 0), per_kept)
    for elements, per_kept in sizes.items():
        for kernel in _reached(_joined_by_arrays(module, elements), set(found)):
            found.setdefault(kernel, per_kept)
    return found


MIN_JACOBIAN_BASIS = 64  # an identity this large in a matmul seeds a Jacobian; a smaller one is an algorithm's block


def _identity_matrix_size(module: HloModule, values: Instruction | None) -> int:
    """n where ``values`` holds the n x n identity made from positions (``jnp.eye(n)``: iota == iota) in its last two
    dimensions, checked on whole sampled rows; 0 otherwise."""
    import numpy as np

    if values is None or values.shape is None or len(values.shape.dims) < 2:
        return 0
    *outer, n, columns = values.shape.dims
    if n != columns or n < MIN_JACOBIAN_BASIS:
        return 0
    rows = np.unique(np.linspace(0, n - 1, min(n, MASK_SAMPLES)).astype(np.int64))
    cols = np.unique(np.linspace(0, n - 1, min(n, MASK_ROW_SAMPLES)).astype(np.int64))
    at = [np.zeros(1, dtype=np.int64) for _ in outer] + list(np.meshgrid(rows, cols, indexing="ij", sparse=True))
    got = _position_values(module, values, at)
    if got is None:
        return 0
    got = np.broadcast_to(np.asarray(got, dtype=float), (*[1] * len(outer), len(rows), len(cols)))
    return n if np.array_equal(got.reshape(len(rows), len(cols)), rows[:, None] == cols[None, :]) else 0


def _read_after(module: HloModule, kernel: str) -> set[str]:
    """``kernel`` and every entry-level instruction that reads its result, directly or through others."""
    reached, frontier = {kernel}, [kernel]
    while frontier:
        for reader in module.consumers(frontier.pop()):
            if reader.computation == module.entry and reader.name not in reached:
                reached.add(reader.name)
                frontier.append(reader.name)
    return reached


def _jacobian_kernels(module: HloModule) -> dict[str, int]:
    """The kernels of Jacobians built in full: those of matmuls by an n x n identity, a reverse- or forward-mode
    derivative's seed (``jax.jacrev`` pulls back each of its rows, ``jax.jacfwd`` pushes each forward), and every
    kernel that reads their results, directly or through others: kernel -> n. A Jacobian a loop reads (a Newton or
    conjugate-gradient iteration's Hessian) is left out: reused at each iteration, it can cost less than the
    products would (a TPU v5e built a 2048-square Hessian for eight conjugate-gradient steps faster than eight
    Hessian-vector products took)."""
    seeds: dict[str, int] = {}
    for product in module.instructions.values():
        if product.opcode not in ("dot", "convolution"):
            continue
        basis = max(_identity_matrix_size(module, module.operand(product, side)) for side in (0, 1))
        if basis and (runner := _entry_level(module, product)) is not None:
            seeds[runner.name] = max(seeds.get(runner.name, 0), basis)
    found: dict[str, int] = {}
    for seed, basis in seeds.items():
        reached = _read_after(module, seed)
        if any(module.instructions[name].opcode == "while" for name in reached):
            continue
        for name in reached:
            found[name] = max(found.get(name, 0), basis)
    return found


# Ops whose result is all zeros where their first operand is (a zero moved, reshaped, converted or sliced), where
# any operand is (products), and where every operand is (sums, a select's two branches).
_ZERO_KEEPING = frozenset({"broadcast", "convert", "copy", "bitcast", "reshape", "transpose", "slice", "dynamic-slice",
                           "reverse", "copy-start", "copy-done", "negate"})
_ZERO_ANNIHILATING = frozenset({"multiply", "dot", "convolution"})
_ZERO_SUMMING = frozenset({"add", "subtract", "maximum", "minimum"})
MAX_ZERO_DEPTH = 256  # an operand chain longer than this is taken to hold values


class _Zeros:
    """Which instructions of a module hold only zeros: a zero constant and what keeps, multiplies or sums it."""

    def __init__(self, module: HloModule):
        self._module = module
        self._known: dict[str, bool] = {}

    def __call__(self, instruction: Instruction | None, depth: int = 0) -> bool:
        if instruction is None or depth > MAX_ZERO_DEPTH:
            return False
        if instruction.name not in self._known:
            self._known[instruction.name] = False  # a cycle through a loop's state is not a zero
            self._known[instruction.name] = self._holds_zeros(instruction, depth)
        return self._known[instruction.name]

    def _holds_zeros(self, instruction: Instruction, depth: int) -> bool:
        module, opcode = self._module, instruction.opcode
        operands = [module.operand(instruction, index) for index in range(len(instruction.operands))]
        if opcode == "constant":
            return instruction.scalar == 0
        if opcode == "parameter" and instruction.computation in module.runs_as:
            fusion = module.instructions.get(module.runs_as[instruction.computation])
            return fusion is not None and self(module.operand(fusion, instruction.parameter), depth + 1)
        if opcode == "fusion" and instruction.calls in module.roots:
            return self(module.instructions.get(module.roots[instruction.calls]), depth + 1)
        if opcode in _ZERO_KEEPING:
            return bool(operands) and self(operands[0], depth + 1)
        if opcode in _ZERO_ANNIHILATING:
            return any(self(operand, depth + 1) for operand in operands)
        if opcode in _ZERO_SUMMING or (opcode == "reduce" and len(operands) == 2):
            return bool(operands) and all(self(operand, depth + 1) for operand in operands)
        if opcode == "select" and len(operands) == 3:
            return self(operands[1], depth + 1) and self(operands[2], depth + 1)
        return False

    def annihilates(self, instruction: Instruction) -> bool:
        """Whether ``instruction`` is a product by an all-zero operand."""
        return instruction.opcode in _ZERO_ANNIHILATING and any(
            self(self._module.operand(instruction, index)) for index in range(len(instruction.operands)))


def _needed(module: HloModule, zeros: _Zeros) -> set[str]:
    """The instructions the entry computation's results need: those its root reads, directly or through others,
    except through an instruction that holds only zeros (its value is known without its operands)."""
    needed, waiting = set(), [module.roots.get(module.entry, "")]
    while waiting:
        name = waiting.pop()
        instruction = module.instructions.get(name)
        if instruction is None or name in needed:
            continue
        needed.add(name)
        if zeros(instruction):
            continue
        if instruction.opcode == "fusion" and instruction.calls in module.roots:
            waiting.append(module.roots[instruction.calls])
        elif instruction.opcode == "parameter" and instruction.computation in module.runs_as:
            fusion = module.instructions.get(module.runs_as[instruction.computation])
            if fusion is not None and instruction.parameter < len(fusion.operands):
                waiting.append(fusion.operands[instruction.parameter])
        else:
            waiting.extend(instruction.operands)
    return needed


def _zeroed_work(module: HloModule) -> dict[str, float]:
    """Where the program multiplies by a constant zero, the kernels whose work it throws away: kernel -> 1.0 for one
    whose result nothing needs (it only feeds products with zero), else the share of its matmul FLOPs whose operand
    holds only zeros (a gradient of zeros multiplied through a layer)."""
    zeros = _Zeros(module)
    if not any(zeros.annihilates(i) for i in module.instructions.values()):
        return {}
    needed = _needed(module, zeros)
    found: dict[str, float] = {}
    for kernel in _kernels(module):
        if kernel.computation != module.entry or kernel.opcode in _NOT_A_BUFFER:
            continue
        body = _body(module, kernel)
        if kernel.name not in needed:
            # One nothing reads is there for its effect (a host callback, an outfeed), not for a zero.
            if module.consumers(kernel.name) and any(i.opcode not in _MOVES_OR_RETYPES for i in body):
                found[kernel.name] = 1.0
            continue
        matmuls = [i for i in body if i.opcode in ("dot", "convolution")]
        if zeroed := sum(i.flops for i in matmuls if zeros.annihilates(i)):
            found[kernel.name] = zeroed / sum(i.flops for i in matmuls)
    return found


def _running_sums(module: HloModule) -> dict[str, int]:
    """The kernels of matmuls by a triangular matrix of ones, which sum each position's predecessors (a cumulative
    sum written as ``tril(ones) @ x``), and those joined to them by arrays of the matrix's size (the kernel that
    makes it): kernel -> the positions summed over."""
    found: dict[str, int] = {}
    for product in module.instructions.values():
        if product.opcode not in ("dot", "convolution"):
            continue
        if (positions := max(_triangle_size(module, module.operand(product, side)) for side in (0, 1))) >= MIN_SUMMED:
            found[_outermost(module, product).name] = positions
    for positions in set(found.values()):
        joined = _joined_by_arrays(module, positions * positions)
        for kernel in _reached(joined, {name for name, summed in found.items() if summed == positions}):
            found.setdefault(kernel, positions)
    return found


def _windows_side_by_side(module: HloModule, root: Instruction | None) -> int:
    """How many windows of an array a fusion's root copies side by side: slices written into a buffer (a
    dynamic-update-slice of a slice), counted along the one dimension the buffer is wider in, or a convolution by
    an identity kernel (one output per window position); 0 for any other root."""
    if root is not None and root.opcode == "convolution":
        return _identity_size(module, module.operand(root, 1))
    if root is None or root.opcode != "dynamic-update-slice" or root.shape is None:
        return 0
    update = module.operand(root, 1)
    while update is not None and update.opcode in ("bitcast", "reshape", "convert"):
        update = module.operand(update)
    if update is None or update.opcode != "slice" or update.shape is None:
        return 0
    widened = [(whole, part) for whole, part in zip(root.shape.dims, update.shape.dims) if whole != part]
    if len(root.shape.dims) != len(update.shape.dims) or len(widened) != 1:
        return 0
    whole, part = widened[0]
    return whole // part if part and whole % part == 0 else 0


def _scatters_into_constant(module: HloModule, ops: list[Instruction]) -> tuple[int, ...]:
    """The shape of the largest array ``ops``' scatters add into whose values start as a constant (a broadcast
    zero) and which has the shape of an array the program is given: the gradient of a lookup in a table passed in
    (an embedding's), which is as large as the table; () where none does. The gradient of a gather from values the
    program computes (the diagonal of a similarity matrix) is not a table's: it flows on into the backward pass."""
    scatters = [i for i in ops if i.opcode == "scatter"]
    if not scatters:
        return ()
    given = {instruction.shape.dims for name in module.computations.get(module.entry, [])
             if (instruction := module.instructions[name]).opcode == "parameter" and instruction.shape is not None}
    shapes = [()]
    for scatter in scatters:
        target = module.operand(scatter, 0)
        origin = _origin(module, target)
        if (target is not None and target.shape and target.shape.dims in given and origin is not None
                and origin.opcode == "constant"):
            shapes.append(target.shape.dims)
    return max(shapes, key=math.prod)


def _one_hot(module: HloModule, values: Instruction | None, depth: int = 0) -> int:
    """The classes of the one-hot matrix ``values`` holds (``ids == iota``, as ``jax.nn.one_hot`` builds it; the
    product of two, one class of each, as a mixture of experts' dispatch to an expert's slot; or one scaled per
    row, as its combine weights); 0 where it holds none."""
    compare = _origin(module, values)
    if compare is not None and compare.opcode in ("multiply", "and") and depth < 4:
        sides = [_one_hot(module, module.operand(compare, side), depth + 1) for side in (0, 1)]
        if all(sides):
            return sides[0] * sides[1]
        scale = next((module.operand(compare, side) for side in (0, 1) if not sides[side]), None)
        while scale is not None and scale.opcode == "convert":
            scale = module.operand(scale)
        return max(sides) if compare.opcode == "multiply" and scale is not None and scale.opcode == "broadcast" else 0
    if compare is None or compare.opcode != "compare" or compare.direction != "EQ":
        return 0
    for side in (0, 1):
        iota = _origin(module, module.operand(compare, side))
        if iota is not None and iota.opcode == "iota" and iota.shape and iota.iota_dimension < len(iota.shape.dims):
            return iota.shape.dims[iota.iota_dimension]
    return 0


def _one_hot_classes(module: HloModule, ops: list[Instruction], root: Instruction | None) -> int:
    """The classes of the widest one-hot matrix a kernel's dots and convolutions multiply, or that it makes for
    one (its result): a lookup (or a sum by id) paid in FLOPs."""
    operands = [module.operand(matmul, index) for matmul in ops if matmul.opcode in ("dot", "convolution")
                for index in (0, 1)]
    return max((_one_hot(module, values) for values in (*operands, root)), default=0)


def _batched_fields(ops: list[Instruction], arrays: list[Instruction]) -> dict:
    """A kernel's narrowest batched-matmul dimension and the elements of the largest of ``arrays`` (the
    instructions whose results it reads or writes)."""
    widths = [min(i.batched_mkn) for i in ops if i.batched_mkn]
    return {"matmul_width": min(widths, default=0),
            "largest_elements": max((math.prod(i.shape.dims) for i in arrays if i.shape is not None), default=0)}


def _bytes_accessed(module: HloModule, kernel: Instruction) -> int:
    """The bytes of the arrays an entry-level kernel reads (its operands) and writes (its result, a multi-output
    fusion's every part), each counted once."""
    root = module.instructions.get(module.roots.get(kernel.calls, "")) if kernel.shape is None else None
    written = [kernel.shape] if kernel.shape is not None else [
        part.shape for part in (module.instructions.get(name) for name in (root.operands if root is not None
                                                                             and root.opcode == "tuple" else []))
        if part is not None]
    read = [operand.shape for operand in (module.instructions.get(name) for name in dict.fromkeys(kernel.operands))
            if operand is not None]
    return sum(shape.bytes for shape in (*read, *written) if shape is not None)


def _copies_argument(module: HloModule, instruction: Instruction) -> bool:
    """Whether ``instruction`` copies one of the program's arguments, unchanged, into a new buffer: the first step
    of an update made out of place."""
    source = module.operand(instruction)
    return (instruction.opcode == "copy" and source is not None and source.opcode == "parameter"
            and source.computation == module.entry and source.shape is not None and source.shape == instruction.shape)


_READ_AS_IS = frozenset({"bitcast", "reshape", "copy", "convert"})


def _slices_read(module: HloModule, name: str, depth: int = 0) -> dict[str, float] | None:
    """The slices ``name``'s result is read through (past value-passing ops, into fusions): each window, as
    written, with the share of elements it keeps; None where a reader reads every element."""
    windows: dict[str, float] = {}
    for reader in module.consumers(name):
        if reader.opcode == "slice":
            windows[reader.window] = reader.kept_share
            continue
        if reader.opcode == "gather" and reader.operands[0] == name and reader.operands.count(name) == 1:
            # Rows picked at positions the program computes (take_along_axis of the masked positions): each
            # gather its own window, its share the rows it keeps.
            windows[f"gather {reader.name}"] = _elements_over(reader, module.instructions.get(name))
            continue
        if depth < 8 and reader.opcode in _READ_AS_IS:
            inner = [reader]
        elif depth < 8 and reader.opcode == "fusion" and reader.calls in module.computations:
            inner = [p for n in module.computations[reader.calls] if (p := module.instructions[n]).opcode ==
                     "parameter" and 0 <= p.parameter < len(reader.operands) and reader.operands[p.parameter] == name]
        else:
            return None
        for through in inner:
            read = _slices_read(module, through.name, depth + 1)
            if read is None:
                return None
            windows.update(read)
    return windows if module.consumers(name) else None


def _elements_over(part: Instruction, whole: Instruction | None) -> float:
    """``part``'s elements over ``whole``'s, up to 1 (1 where either shape is unknown)."""
    if part.shape is None or whole is None or whole.shape is None or not math.prod(whole.shape.dims):
        return 1.0
    return min(1.0, math.prod(part.shape.dims) / math.prod(whole.shape.dims))


def _share_read(module: HloModule, name: str) -> float:
    """The share of ``name``'s elements its readers read, up to 1: all of them where any reader reads every one."""
    windows = _slices_read(module, name)
    return 1.0 if windows is None else min(1.0, sum(windows.values()))


MIN_COMPUTED_PER_KEPT = 2  # elements computed per element read, from which a result is computed mostly to be dropped
# What a kernel may do to floating-point values and still only pick elements of an array: gather, slice, select
# between them and a fill value, and lay them out.
_PICKS = (_MOVES_OR_RETYPES - {"convert", "bitcast-convert"}) | {"gather", "select"}


def _body(module: HloModule, instruction: Instruction) -> list[Instruction]:
    """What an entry-level instruction computes: a fusion's instructions, or the instruction itself."""
    if instruction.opcode == "fusion" and instruction.calls in module.computations:
        return _fused(module, instruction.calls)
    return [instruction]


def _computed_per_kept(module: HloModule) -> dict[str, int]:
    """The entry-level kernels that compute more than the program reads: a matmul or convolution whose result is
    read only through slices that keep one element in N or fewer (``y[:, ::2, ::2]``, ``logits[:, -1]``), its copies
    and relayouts and the kernels that only pick the kept elements out of it (a gather, a slice), and on the
    gradient's side the zeros put around or between the kept elements' gradients (a pad as large as such a result,
    or the zeros a gather's gradient scatters the kept rows' gradients into) and the matmuls that read them:
    kernel -> N."""
    entry = [module.instructions[name] for name in module.computations.get(module.entry, [])]
    bodies = {kernel.name: _body(module, kernel) for kernel in entry}
    found: dict[str, int] = {}
    thinned: dict[tuple[int, ...], int] = {}  # a thinned result's shape -> N
    thinned_elements: dict[int, int] = {}  # its elements: a scatter's zeros may be laid out otherwise
    for kernel in entry:
        if kernel.shape is None or not any(i.opcode in ("dot", "convolution") for i in bodies[kernel.name]):
            continue
        if (per_kept := int(1 / max(_share_read(module, kernel.name), 1e-9))) >= MIN_COMPUTED_PER_KEPT:
            found[kernel.name] = thinned[kernel.shape.dims] = per_kept
            thinned_elements[math.prod(kernel.shape.dims)] = per_kept
    if not thinned:
        return found

    def zeros_around(instruction: Instruction | None) -> int:
        if instruction is None or instruction.shape is None:
            return 1
        if instruction.opcode == "pad":
            per_kept, not_zeros = thinned.get(instruction.shape.dims, 1), instruction.kept_share
        elif instruction.opcode == "scatter" and (target := _origin(module, module.operand(instruction))) and (
                target.opcode == "constant") and (updates := module.operand(instruction, 2)) is not None:
            per_kept = thinned_elements.get(math.prod(instruction.shape.dims), 1)
            not_zeros = _elements_over(updates, instruction)
        else:
            return 1
        return per_kept if int(1 / max(not_zeros, 1e-9)) >= per_kept else 1

    moves, picks = [], []
    for kernel in entry:
        body = bodies[kernel.name]
        if all(i.opcode in _MOVES_OR_RETYPES and i.opcode not in ("slice", "dynamic-slice", "gather", "pad")
               for i in body if i.opcode not in _NOT_A_BUFFER):
            moves.append(kernel)
            continue
        if all(i.opcode in _PICKS for i in body if i.opcode not in _NOT_A_BUFFER and i.dtype in _WIDTH):
            picks.append(kernel)
        spread = [zeros_around(i) for i in body] + [
            zeros_around(_origin(module, module.operand(matmul, side)))
            for matmul in body if matmul.opcode in ("dot", "convolution") for side in (0, 1)]
        if max(spread, default=1) > 1:
            found[kernel.name] = max(found.get(kernel.name, 1), *spread)
    # Copies and relayouts of those results, and the zeros a found scatter adds into.
    for kernel in moves:
        source = _origin(module, module.operand(kernel))
        runner = _entry_level(module, source) if source is not None else None
        if runner is not None and runner.name in found:
            found[kernel.name] = found[runner.name]
        elif per_kept := max((found.get(reader.name, 0) for reader in module.consumers(kernel.name)
                              if reader.operands[:1] == [kernel.name] and any(
                                  i.opcode == "scatter" for i in bodies.get(reader.name, []))), default=0):
            found[kernel.name] = per_kept
    # The kernels that pick the read elements out of such a result (a gather or slice with, at most, math on their
    # indices): computing only what is read leaves nothing to pick.
    for kernel in picks:
        if per_kept := max((found.get(runner.name, 0) for name in kernel.operands
                            if (source := _origin(module, module.instructions.get(name))) is not None
                            and (runner := _entry_level(module, source)) is not None
                            and source.shape is not None and source.shape.dims in thinned), default=0):
            found[kernel.name] = max(found.get(kernel.name, 1), per_kept)
    return found


MIN_DECODE_POSITIONS = 64  # a buffer's positions from which one written per call is a decoding loop's
# Of the row a decoding program reads, the elements a kernel's result has per position, at least, to be the work
# done at every position (a key or value projection of a few heads, narrower than the model, included).
PER_POSITION_SHARE = 1 / 8


def _outermost(module: HloModule, instruction: Instruction) -> Instruction:
    """The kernel that runs ``instruction``: itself, or the outermost fusion it is nested in."""
    for _ in range(16):  # fusions nest a few deep; the bound guards a malformed module
        runner = module.instructions.get(module.runs_as.get(instruction.computation, ""))
        if runner is None:
            break
        instruction = runner
    return instruction


def _entry_level(module: HloModule, instruction: Instruction) -> Instruction | None:
    """The entry computation's instruction that runs ``instruction`` (:func:`_outermost`); None for one in a
    loop's body or another called computation."""
    runner = _outermost(module, instruction)
    return runner if runner.computation == module.entry else None


def _made_by_matmul(module: HloModule, instruction: Instruction | None, depth: int = 0) -> bool:
    """Whether ``instruction``'s values come out of a kernel that runs a matmul or convolution, or out of a few
    ops on such a kernel's result (a residual add fused with the read)."""
    source = _origin(module, instruction)
    if source is not None and source.opcode == "get-tuple-element":
        source = module.operand(source)
    runner = _entry_level(module, source) if source is not None else None
    if source is None or runner is None:
        return False
    if any(i.opcode in ("dot", "convolution") or _MATMUL_TARGET.search(i.target) for i in _body(module, runner)):
        return True
    return depth < 3 and any(_made_by_matmul(module, module.instructions.get(name), depth + 1)
                             for name in source.operands)


def _one_row(module: HloModule, whole: Shape | None, row: Shape | None, indices: list[str]) -> int:
    """The length of the one dimension along which ``row`` is a single position of ``whole``, taken at an index
    the program computes (a constant index is a fixed slice, not a loop's position); 0 where it is not one."""
    if whole is None or row is None or len(whole.dims) != len(row.dims) or len(indices) < len(whole.dims):
        return 0
    differ = [axis for axis, (size, kept) in enumerate(zip(whole.dims, row.dims)) if size != kept]
    if len(differ) != 1 or row.dims[differ[0]] != 1 or whole.dims[differ[0]] < MIN_DECODE_POSITIONS:
        return 0
    index = _origin(module, module.instructions.get(indices[differ[0]]))
    return whole.dims[differ[0]] if index is not None and index.opcode != "constant" else 0


def _decoding_row(module: HloModule) -> tuple[int, int]:
    """A program that computes activations at every position of a buffer it is given and reads one row of them,
    at the position it then writes one element of that buffer at (``tokens.at[:, t + 1].set(argmax(f(tokens)[:,
    t]))``): the buffer's positions and the row's elements; (0, 0) for any other program. Only the entry computation
    and its fusions count: a loop's body reading and writing one position per iteration is a scan, not a decoding
    call; and a training step that reads one position (a classifier's pooled token) writes that position's gradient
    into zeros, not into a buffer it is given."""
    read: dict[int, int] = {}
    written: set[int] = set()
    for instruction in module.instructions.values():
        if instruction.opcode not in ("dynamic-slice", "dynamic-update-slice") or _entry_level(
                module, instruction) is None:
            continue
        if instruction.opcode == "dynamic-slice":
            source = module.operand(instruction)
            positions = _one_row(module, source.shape if source else None, instruction.shape, instruction.operands[1:])
            if positions and instruction.shape is not None and _made_by_matmul(module, source):
                read[positions] = max(read.get(positions, 0), math.prod(instruction.shape.dims))
        else:
            buffer, update = module.operand(instruction, 0), module.operand(instruction, 1)
            origin = _origin(module, buffer)
            if origin is None or origin.opcode != "parameter" or origin.computation != module.entry:
                continue  # not a buffer the program is given: a dynamic slice's gradient, written into zeros
            if positions := _one_row(module, buffer.shape if buffer else None, update.shape if update else None,
                                     instruction.operands[2:]):
                written.add(positions)
    positions = max(set(read) & written, default=0)
    return positions, read.get(positions, 0)


def _output_elements(module: HloModule, kernel: Instruction) -> int:
    """The elements of a kernel's result, the largest of a multi-output fusion's."""
    if kernel.shape is not None:
        return math.prod(kernel.shape.dims)
    root = module.instructions.get(module.roots.get(kernel.calls, ""))
    if root is None or root.opcode != "tuple":
        return 0
    return max((math.prod(part.shape.dims) for part in filter(None, (module.instructions.get(name)
                                                                    for name in root.operands)) if part.shape),
               default=0)


def _recomputed_positions(module: HloModule) -> dict[str, int]:
    """In a decoding program without a key/value cache (:func:`_decoding_row`), the entry-level kernels whose math
    spans every position: kernel -> the positions."""
    positions, row = _decoding_row(module)
    if not positions:
        return {}
    found = {}
    for name in module.computations.get(module.entry, []):
        kernel = module.instructions[name]
        if any(i.opcode not in _MOVES_OR_RETYPES and i.opcode != "fusion" for i in _body(module, kernel)) and (
                _output_elements(module, kernel) >= PER_POSITION_SHARE * positions * row):
            found[name] = positions
    return found


@dataclass(frozen=True)
class MatmulChain:
    """Two matmuls where the first's result, an [m, n] matrix made from [m, k] @ [k, n], is contracted over n against
    an [n, p] matrix by the second (``batch`` times each): ``(a @ b) @ c``, or its mirror ``c @ (a @ b)``."""

    batch: int
    m: int
    k: int
    n: int
    p: int

    @property
    def flops(self) -> float:
        """Of the order the program multiplies in: the [m, n] intermediate, then its product with [n, p]."""
        return 2.0 * self.batch * self.m * self.n * (self.k + self.p)

    @property
    def reassociated_flops(self) -> float:
        """Of the other order, ``a @ (b @ c)``: a [k, p] intermediate, then [m, k] @ [k, p]."""
        return 2.0 * self.batch * self.k * self.p * (self.m + self.n)

    def _on(self, matrix_unit: int) -> tuple[int, int, int, int]:
        """m, k, n and p as a matrix unit ``matrix_unit`` wide (0: none) computes them: a dimension narrower than
        the unit at the unit's width (a product by an [n, 8] matrix costs there what one by an [n, 128] does)."""
        m, k, n, p = (max(size, matrix_unit) for size in (self.m, self.k, self.n, self.p))
        return m, k, n, p

    def reassociated_flops_on(self, matrix_unit: int) -> float:
        """The other order's FLOPs as a matrix unit ``matrix_unit`` wide computes them."""
        m, k, n, p = self._on(matrix_unit)
        return 2.0 * self.batch * k * p * (m + n)

    def fewer_on(self, matrix_unit: int) -> float:
        """How many times fewer FLOPs the other order takes on a matrix unit ``matrix_unit`` wide (0: none)."""
        m, k, n, p = self._on(matrix_unit)
        return 2.0 * self.batch * m * n * (k + p) / max(self.reassociated_flops_on(matrix_unit), 1)

    @property
    def reassociated_elements(self) -> int:
        """The elements the other order's two products read and write: ``b`` [k, n] and ``c`` [n, p] into a [k, p]
        product, then ``a`` [m, k] and that into the [m, p] result."""
        k_by_p = self.k * self.p
        return self.batch * (self.k * self.n + self.n * self.p + k_by_p + self.m * self.k + k_by_p + self.m * self.p)

    @property
    def through_intermediate_flops(self) -> float:
        """The FLOPs of a product of the intermediate [m, n] with an [n, p] matrix: the chain's second product, or
        in training one of its gradient's that reads the intermediate (or an array of its size) the same way."""
        return 2.0 * self.batch * self.m * self.n * self.p

    @property
    def intermediate_elements(self) -> int:
        return self.batch * self.m * self.n


MIN_REASSOCIATED_GAIN = 4  # times fewer FLOPs in the other order, from which a chain is multiplied in the costly one
# Ops a product's values pass through unchanged (up to dtype and layout), so that the product they feed reassociates.
_REASSOCIATES = frozenset({"convert", "copy", "bitcast", "reshape", "transpose", "copy-start", "copy-done"})
_SCALES = frozenset({"multiply", "divide"})


def _scale_spans_one_dimension(module: HloModule, scale: Instruction | None, chain_size: tuple[int, int, int]) -> bool:
    """Whether ``scale`` is a broadcast of a scalar or of a vector per row or column (a normaliser), not of a
    matrix such as a mask: its source holds no more elements than ``batch`` x the larger of m and n, for a product
    of ``chain_size`` (batch, m, n)."""
    while scale is not None and scale.opcode in ("convert", "bitcast", "reshape", "copy"):
        scale = module.operand(scale)
    if scale is None or scale.opcode != "broadcast":
        return False
    source = module.operand(scale)
    batch, m, n = chain_size
    return source is not None and source.shape is not None and math.prod(source.shape.dims) <= batch * max(m, n)


def _only_summed(module: HloModule, product: Instruction) -> bool:
    """Whether an elementwise product is only summed (an inner product, as a normaliser's gradient takes one with
    the intermediate), through converts and copies, and a fusion's boundary where it is its root."""
    readers = module.consumers(product.name)
    if module.roots.get(product.computation) == product.name and product.computation in module.runs_as:
        readers = [*readers, *module.consumers(module.runs_as[product.computation])]
    return bool(readers) and all(reader.opcode == "reduce" or (reader.opcode in _REASSOCIATES
                                                               and _only_summed(module, reader))
                                 for reader in readers)


def _products_fed(module: HloModule, name: str, chain_size: tuple[int, int, int],
                  seen: set[str] | None = None) -> list[tuple[Instruction, int]] | None:
    """The dots and convolutions ``name``'s values reach only through ops that commute with reassociating a product:
    converts, copies and reshapes, transposes, a fusion's boundaries and tuple elements, and a scaling by a
    broadcast vector or scalar; each with the operand it reads them as. None where the values are also needed
    otherwise (an elementwise op, a mask, a program output): the product is then made whatever the order of the
    others. A sum over the values (a normaliser's row sums) is a product by a vector, and reassociates too."""
    seen = set() if seen is None else seen
    if name in seen:
        return []
    seen.add(name)
    instruction = module.instructions[name]
    passed_to: list[str] = []
    if module.roots.get(instruction.computation) == name and instruction.computation in module.runs_as:
        passed_to.append(module.runs_as[instruction.computation])
    found: list[tuple[Instruction, int]] = []
    for reader in module.consumers(name):
        if reader.matmul_mkn is not None:
            found += [(reader, side) for side in (0, 1) if reader.operands[side:side + 1] == [name]]
        elif reader.opcode in _REASSOCIATES:
            passed_to.append(reader.name)
        elif reader.opcode in _SCALES and len(reader.operands) == 2 and reader.operands[0] != reader.operands[1]:
            other = 1 if reader.operands[0] == name else 0
            if (reader.opcode == "multiply" or other == 1) and _scale_spans_one_dimension(
                    module, module.operand(reader, other), chain_size):
                passed_to.append(reader.name)
            elif not _only_summed(module, reader):
                return None
        elif reader.opcode == "fusion" and reader.calls in module.computations:
            passed_to += [p.name for n in module.computations[reader.calls]
                          if (p := module.instructions[n]).opcode == "parameter"
                          and reader.operands[p.parameter:p.parameter + 1] == [name]]
        elif (reader.opcode == "tuple" and module.roots.get(reader.computation) == reader.name
              and reader.computation in module.runs_as):
            indices = {index for index, operand in enumerate(reader.operands) if operand == name}
            passed_to += [element.name for element in module.consumers(module.runs_as[reader.computation])
                          if element.opcode == "get-tuple-element" and element.tuple_index in indices]
        elif reader.opcode != "reduce":
            return None
    for through in passed_to:
        fed = _products_fed(module, through, chain_size, seen)
        if fed is None:
            return None
        found += fed
    return found


def _chain(first: Instruction, second: Instruction, side: int) -> MatmulChain | None:
    """The chain ``first``'s result makes with ``second``, which reads it as operand ``side``: None where the second
    does not contract one of the first's result dimensions against the same batch."""
    if first.matmul_mkn is None or second.matmul_mkn is None or first.shape is None or second.shape is None:
        return None
    (m, k, n), (rows, contracted, columns) = first.matmul_mkn, second.matmul_mkn
    batch, second_batch = (math.prod(i.shape.dims) // max(i.matmul_mkn[0] * i.matmul_mkn[2], 1)
                           for i in (first, second) if i.matmul_mkn is not None)
    kept, other = (rows, columns) if side == 0 else (columns, rows)
    if batch != second_batch or (kept, contracted) not in ((m, n), (n, m)):
        return None
    return MatmulChain(batch=batch, m=kept, k=k, n=contracted, p=other)


def _joined_by_arrays(module: HloModule, elements: int) -> dict[str, set[str]]:
    """Each kernel's neighbours through arrays of ``elements`` elements, one kernel writing and the other reading
    each (a product's intermediate, and in training its gradient), in either direction."""
    kernels = {k.name: k for k in _kernels(module) if k.opcode not in ("parameter", "constant")}

    def sized(instruction: Instruction) -> bool:
        return instruction.shape is not None and math.prod(instruction.shape.dims) == elements

    joined: dict[str, set[str]] = {}
    for reader in kernels.values():
        for written in filter(None, map(kernels.get, reader.operands)):
            # A tuple's element has the size; the tuple itself is not parsed as one array.
            if sized(written) or (reader.opcode in ("get-tuple-element", "copy-done") and sized(reader)):
                joined.setdefault(reader.name, set()).add(written.name)
                joined.setdefault(written.name, set()).add(reader.name)
    return joined


def _reached(joined: dict[str, set[str]], seeds: set[str]) -> set[str]:
    reached, frontier = set(seeds), list(seeds)
    while frontier:
        for neighbour in joined.get(frontier.pop(), set()) - reached:
            reached.add(neighbour)
            frontier.append(neighbour)
    return reached


def _costly_chains(module: HloModule) -> dict[str, MatmulChain]:
    """The kernels of a matmul chain multiplied in the order that costs at least ``MIN_REASSOCIATED_GAIN`` times
    the FLOPs of the other (``(adj @ adj) @ x`` for ``adj @ (adj @ x)``): those of its two products, and those
    joined to them by arrays of the intermediate's size (its gradient's, in training): kernel -> the chain."""
    found: dict[str, MatmulChain] = {}
    graphs: dict[int, dict[str, set[str]]] = {}  # by the intermediate's elements
    for first in module.instructions.values():
        if first.matmul_mkn is None or first.shape is None:
            continue
        size = (math.prod(first.shape.dims) // max(first.matmul_mkn[0] * first.matmul_mkn[2], 1),
                first.matmul_mkn[0], first.matmul_mkn[2])
        fed = _products_fed(module, first.name, size) or []
        chains = [(second, _chain(first, second, side)) for second, side in fed]
        if any(chain is None or chain.flops < MIN_REASSOCIATED_GAIN * chain.reassociated_flops for _, chain in chains):
            continue  # a product that reads the intermediate as it is: it is made in either order
        for second, chain in chains:
            assert chain is not None
            seeds = {_outermost(module, first).name, _outermost(module, second).name}
            if chain.intermediate_elements not in graphs:
                graphs[chain.intermediate_elements] = _joined_by_arrays(module, chain.intermediate_elements)
            for kernel in _reached(graphs[chain.intermediate_elements], seeds):
                if kernel not in found or found[kernel].flops < chain.flops:
                    found[kernel] = chain
    return found


@dataclass(frozen=True)
class SharedMatrixCopies:
    """A batched matmul's operand that is one matrix broadcast along the batch: ``batch`` copies of ``matrix``."""

    batch: int
    matrix: tuple[int, ...]


MIN_COPIES = 8  # batch elements from which a matrix broadcast along the batch is copied per example
def _broadcast_source(module: HloModule, instruction: Instruction | None) -> Instruction | None:
    """The broadcast an operand's values come from, past converts, copies and reshapes and across fusion
    boundaries; None where they come from anything else."""
    origin = _origin(module, instruction, passes=_PASSES_VALUES - {"broadcast"})
    return origin if origin is not None and origin.opcode == "broadcast" else None


def _copies_of_one_matrix(module: HloModule, product: Instruction) -> SharedMatrixCopies | None:
    """Where a batched matmul multiplies each of at least ``MIN_COPIES`` batch elements by a copy of one matrix: an
    operand broadcast from an array of at least two dimensions that lacks the batch (a vmap that batched the
    weights with the inputs, as a ``lax.cond`` on a per-example predicate does)."""
    if product.matmul_mkn is None or product.shape is None:
        return None
    m, _, n = product.matmul_mkn
    batch = math.prod(product.shape.dims) // max(m * n, 1)
    if batch < MIN_COPIES:
        return None
    for side in (0, 1):
        broadcast = _broadcast_source(module, module.operand(product, side))
        source = module.operand(broadcast) if broadcast is not None else None
        if broadcast is None or broadcast.shape is None or source is None or source.shape is None:
            continue
        matrix = tuple(size for size in source.shape.dims if size > 1)
        if len(matrix) >= 2 and math.prod(broadcast.shape.dims) >= batch * math.prod(source.shape.dims):
            return SharedMatrixCopies(batch=batch, matrix=matrix)
    return None


def _shared_matrix_copies(module: HloModule) -> dict[str, SharedMatrixCopies]:
    """The kernels of batched matmuls that multiply per-example copies of one matrix (:func:`_copies_of_one_matrix`),
    those joined to them by arrays of the copies' size (the broadcast), and those that compute such an array inside
    them (the per-example weight gradients, summed over the batch in the same fusion): kernel -> the copies."""
    found: dict[str, SharedMatrixCopies] = {}
    by_size: dict[int, SharedMatrixCopies] = {}
    for product in module.instructions.values():
        if (copies := _copies_of_one_matrix(module, product)) is not None:
            by_size.setdefault(copies.batch * math.prod(copies.matrix), copies)
            found[_outermost(module, product).name] = copies
    for elements, copies in by_size.items():
        joined = _joined_by_arrays(module, elements)
        for kernel in _reached(joined, {name for name, seen in found.items() if seen == copies}):
            found.setdefault(kernel, copies)
        for name in module.computations.get(module.entry, []):
            if any(i.shape is not None and math.prod(i.shape.dims) == elements
                   for i in _body(module, module.instructions[name])):
                found.setdefault(name, copies)
    return found


def _fusion_work(module: HloModule, fusion: Instruction) -> KernelWork:
    body = _fused(module, fusion.calls)
    math_ops = [i for i in body if i.opcode not in _MOVES_OR_RETYPES and i.opcode != "fusion"]
    moves = [i for i in body if i.opcode not in _NOT_A_BUFFER]
    dtypes = Counter(i.dtype for i in math_ops if i.dtype)
    dtype = dtypes.most_common(1)[0][0] if dtypes else fusion.dtype
    root = module.instructions.get(module.roots.get(fusion.calls, ""))
    source = module.operand(root) if root is not None else None
    out = root is not None and root.opcode == "convert" and source is not None and source.dtype == dtype != fusion.dtype
    into = any(i.opcode == "convert" and i.dtype == dtype and (s := module.operand(i)) is not None
               and s.dtype not in ("", dtype) for i in body if i is not root)
    return KernelWork(
        module=module.name, instruction=fusion.name,
        ops=tuple(dict.fromkeys(i.opcode for i in (math_ops or moves))),
        dtype=dtype, io_dtype=fusion.dtype, computes=bool(math_ops),
        converts="between" if out and into else "after" if out else "",
        root=root.opcode if root is not None else "",
        custom_call=next((i.target for i in body if i.opcode == "custom-call" and i.target), ""),
        dtypes=tuple(sorted(dtypes)), updates_per_element=_updates_per_element(module, body),
        scatters_into_constant=_scatters_into_constant(module, body),
        windows_side_by_side=_windows_side_by_side(module, root),
        one_hot_classes=_one_hot_classes(module, body, root), **_matmul_fields(module, body),
        **_batched_fields(body, body),
    )


# The detectors that look at a whole module and mark its kernels: each gives kernel -> the KernelWork field's value.
_MODULE_DETECTORS: dict[str, Callable[[HloModule], dict[str, Any]]] = {
    "computed_per_kept": _computed_per_kept,
    "recomputed_positions": _recomputed_positions,
    "costly_chain": _costly_chains,
    "shared_matrix_copies": _shared_matrix_copies,
    "running_sum_positions": _running_sums,
    "pairs_combined": _pairwise_kernels,
    "kronecker_factors": _kronecker_products,
    "masked_per_kept": _masked_results,
    "jacobian_basis": _jacobian_kernels,
    "zeroed_share": _zeroed_work,
}


def _detected(module: HloModule, failures: dict[str, str] | None) -> dict[str, dict[str, Any]]:
    """Each module detector's marks on ``module``'s kernels. Given ``failures``, a detector that raises marks
    nothing and its error is recorded there; without it, the error propagates."""
    marks: dict[str, dict[str, Any]] = {}
    for field_name, detect in _MODULE_DETECTORS.items():
        try:
            marks[field_name] = detect(module)
        except Exception as error:
            if failures is None:
                raise
            marks[field_name] = {}
            failures[f"{field_name} in {module.name}"] = f"{type(error).__name__}: {error}"[:300]
    return marks


def kernel_work(modules: list[HloModule], failures: dict[str, str] | None = None) -> list[KernelWork]:
    """What every instruction outside a fusion computes: the kernels (and ops) a device trace names.

    ``failures``, where given, collects the module detectors that raised (``"<field> in <module>"`` -> the error),
    and the kernels are described without their marks; without it, a detector's error propagates.
    """
    found = []
    for module in modules:
        marks = _detected(module, failures)
        for instruction in module.instructions.values():
            if (instruction.opcode in _NOT_A_BUFFER or instruction.computation in module.runs_as
                    or instruction.computation in module.applied):
                continue
            marked = {name: values[instruction.name] for name, values in marks.items() if instruction.name in values}
            if instruction.opcode == "fusion" and instruction.calls in module.computations:
                found.append(replace(_fusion_work(module, instruction), **marked,
                                     bytes_accessed=_bytes_accessed(module, instruction)))
            else:
                found.append(KernelWork(
                    module=module.name, instruction=instruction.name,
                    ops=(instruction.target or instruction.opcode,), dtype=instruction.dtype,
                    io_dtype=instruction.dtype, computes=instruction.opcode not in _MOVES_OR_RETYPES,
                    custom_call=instruction.target,
                    dtypes=(instruction.dtype,) if instruction.dtype and instruction.opcode not in _MOVES_OR_RETYPES
                    else (), updates_per_element=_updates_per_element(module, [instruction]),
                    scatters_into_constant=_scatters_into_constant(module, [instruction]),
                    one_hot_classes=_one_hot_classes(module, [instruction], None),
                    copies_argument=_copies_argument(module, instruction),
                    bytes_accessed=_bytes_accessed(module, instruction), **marked,
                    **_matmul_fields(module, [instruction]),
                    **_batched_fields([instruction], [instruction, *filter(None, (
                        module.instructions.get(name) for name in instruction.operands))]),
                ))
    return found


def _most(values: Iterable[str]) -> str:
    counted = Counter(v for v in values if v)
    return counted.most_common(1)[0][0] if counted else ""


def _words(*words: str) -> str:
    return " ".join(word for word in words if word)


def describe(works: list[KernelWork]) -> str:
    """What ``works``, the kernels of one name (in one program or several), compute, in a few words.

    A fusion: the kind of math, its dtype, the converts around it, its ops and root ("element-wise f32 math
    between bf16 converts (sine; root convert)"); a custom call: its target, quoted; another op: its opcode.
    """
    if not works:
        return ""
    dtype, io_dtype = _most(w.dtype for w in works), _most(w.io_dtype for w in works)
    targets = list(dict.fromkeys(w.custom_call for w in works if w.custom_call))
    if targets:
        return ("custom call " + ", ".join(json.dumps(t, ensure_ascii=False) for t in targets)
                + (f" returning {io_dtype}" if io_dtype else ""))
    ops = list(dict.fromkeys(op for w in works for op in w.ops))
    classes = max(w.one_hot_classes for w in works)
    one_hot = "" if not classes else f" {'by' if any(w.flops for w in works) else 'making'} a one-hot matrix of " \
        f"{classes} classes"
    if not any(w.root for w in works):  # an op of its own: a transpose, an all-reduce, a copy-done
        return _words(dtype, ", ".join(ops)) + one_hot
    structured = [_STRUCTURED[op] for op in ops if op in _STRUCTURED]
    if not any(w.computes for w in works):
        kind = "no math, only data movement"
    elif structured:
        kind = _words(dtype, structured[0])
    elif not set(ops) & _NOT_ELEMENTWISE:
        kind = _words("element-wise", dtype, "math")
    else:
        kind = _words(dtype, next(op for op in ops if op in _NOT_ELEMENTWISE))
    if kind.endswith("scatter") and (fan_in := max(w.updates_per_element for w in works)) >= 2:
        kind += f" of {fan_in:.3g} updates per element"
    kind += one_hot
    converts = _most(w.converts for w in works)
    if converts == "between":
        kind += f" between {io_dtype} converts"
    elif converts == "after":
        kind += f" converted to {io_dtype}"
    named = ", ".join(ops[:MAX_OPS_NAMED]) + (", …" if len(ops) > MAX_OPS_NAMED else "")
    roots = "/".join(dict.fromkeys(w.root for w in works if w.root))
    return f"{kind} ({named}; root {roots})"
