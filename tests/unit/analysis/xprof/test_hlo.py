"""The HLO text parser and the three detectors XProf no longer ships, on hand-written modules."""

from __future__ import annotations

import pytest

from evidence_support import ONE_HOT_LOOKUP

from mldiag.analysis.xprof import hlo

LAYOUT_COPY = """HloModule jit_transpose, entry_computation_layout={(f32[32,128]{1,0})->f32[128,32]{1,0}}

%fused_computation (param_0.1: f32[32,128]) -> f32[128,32] {
  %param_0.1 = f32[32,128]{1,0} parameter(0)
  %transpose.0 = f32[128,32]{0,1} transpose(%param_0.1), dimensions={1,0}
  ROOT %copy.1 = f32[128,32]{1,0} copy(%transpose.0)
}

ENTRY %main.1 (args_0_.1: f32[32,128]) -> f32[128,32] {
  %args_0_.1 = f32[32,128]{1,0} parameter(0)
  ROOT %transpose_copy_fusion = f32[128,32]{1,0} fusion(%args_0_.1), kind=kLoop, calls=%fused_computation
}
"""

ROUND_TRIP_AND_REDUCE = """HloModule jit_step

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

ENTRY %main (x: f32[256,1024]) -> (f32[256,1024], f32[256]) {
  %x = f32[256,1024]{1,0} parameter(0)
  %narrow = bf16[256,1024]{1,0} convert(%x)
  %wide = f32[256,1024]{1,0} convert(%narrow)
  %zero = f32[] constant(0)
  %total = f32[256]{0} reduce(%wide, %zero), dimensions={1}, to_apply=%add
  %reshaped = f32[1024,256]{1,0} reshape(%wide)
  ROOT %out = (f32[256,1024]{1,0}, f32[256]{0}) tuple(%wide, %total)
}
"""

FUSED_AND_CLEAN = """HloModule jit_clean

%fused (p: bf16[256,1024]) -> f32[256,1024] {
  %p = bf16[256,1024]{1,0} parameter(0)
  %c = f32[256,1024]{1,0} convert(%p)
  ROOT %t = f32[256,1024]{1,0} tanh(%c)
}

ENTRY %main (x: bf16[256,1024]) -> f32[256,1024] {
  %x = bf16[256,1024]{1,0} parameter(0)
  ROOT %f = f32[256,1024]{1,0} fusion(%x), kind=kLoop, calls=%fused
}
"""


def _module(name, text):
    return hlo.parse_module(name, text)


def test_parser_reads_shapes_layouts_operands_and_fusions():
    module = _module("jit_transpose(18)", LAYOUT_COPY)
    assert module.entry == "main.1"
    copy = module.instructions["copy.1"]
    assert copy.opcode == "copy" and copy.operands == ["transpose.0"]
    assert copy.shape == hlo.Shape("f32", (128, 32), (1, 0)) and copy.shape.bytes == 128 * 32 * 4
    assert module.executor(copy) == "transpose_copy_fusion"
    assert [i.name for i in module.work()] == ["transpose.0", "copy.1"]


def test_tuple_shapes_and_attributes_do_not_confuse_the_parser():
    module = _module("jit_step", ROUND_TRIP_AND_REDUCE)
    out = module.instructions["out"]
    assert out.opcode == "tuple" and out.operands == ["wide", "total"] and out.shape is None
    assert module.instructions["total"].operands == ["wide", "zero"]


def test_a_copy_that_only_changes_the_layout_is_found():
    (issue,) = hlo.detect_layout_mismatch_copies([_module("jit_transpose(18)", LAYOUT_COPY)])
    assert issue.instruction == "copy.1" and issue.runs_as == "transpose_copy_fusion"
    assert issue.shapes == ["f32[128,32]{0,1}", "f32[128,32]{1,0}"]


def test_a_program_that_only_transposes_is_an_unfused_reshape():
    (issue,) = hlo.detect_unfused_reshapes([_module("jit_transpose(18)", LAYOUT_COPY)])
    assert issue.module == "jit_transpose(18)" and "whole program" in issue.detail


def test_a_top_level_reshape_inside_a_bigger_program_is_its_own_kernel():
    (issue,) = hlo.detect_unfused_reshapes([_module("jit_step", ROUND_TRIP_AND_REDUCE)])
    assert issue.instruction == "reshaped" and "own kernel" in issue.detail


def test_a_dtype_round_trip_and_a_convert_materialised_for_a_reduce_are_found():
    issues = hlo.detect_unnecessary_convert_reduce([_module("jit_step", ROUND_TRIP_AND_REDUCE)])
    assert [i.instruction for i in issues] == ["wide"]
    assert "f32 -> bf16 -> f32 round trip" in issues[0].detail


def test_converts_fused_into_compute_are_not_flagged():
    module = _module("jit_clean", FUSED_AND_CLEAN)
    assert hlo.detect_unnecessary_convert_reduce([module]) == []
    assert hlo.detect_unfused_reshapes([module]) == []
    assert hlo.detect_layout_mismatch_copies([module]) == []


def test_standalone_convert_programs_in_both_directions_are_an_op_by_op_round_trip():
    def program(name, source, target):
        return _module(name, f"""HloModule {name}

ENTRY %main (x: {source}[64,64]) -> {target}[64,64] {{
  %x = {source}[64,64]{{1,0}} parameter(0)
  ROOT %c = {target}[64,64]{{1,0}} convert(%x)
}}
""")

    issues = hlo.detect_unnecessary_convert_reduce([program("down(4)", "f32", "bf16"), program("up(10)", "bf16", "f32")])
    assert {i.module for i in issues} == {"down(4)", "up(10)"}
    assert all("op-by-op round trip" in i.detail for i in issues)


def test_a_full_size_convert_whose_only_user_is_a_reduce_is_found():
    module = _module("jit_sum", """HloModule jit_sum

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

ENTRY %main (x: bf16[512,512]) -> f32[512] {
  %x = bf16[512,512]{1,0} parameter(0)
  %wide = f32[512,512]{1,0} convert(%x)
  %zero = f32[] constant(0)
  ROOT %total = f32[512]{0} reduce(%wide, %zero), dimensions={1}, to_apply=%add
}
""")
    (issue,) = hlo.detect_unnecessary_convert_reduce([module])
    assert issue.instruction == "wide" and "only to be reduced" in issue.detail
    assert issue.shapes == ["bf16[512,512]{1,0}", "f32[512,512]{1,0}"]


KERNELS = """HloModule jit_kernels

%region_0 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%fused_reduce (param_0.6: bf16[8,2048]) -> f32[8] {
  %param_0.6 = bf16[8,2048]{1,0} parameter(0)
  %convert.2 = f32[8,2048]{1,0} convert(%param_0.6)
  %zero = f32[] constant(0)
  ROOT %reduce.7 = f32[8]{0} reduce(%convert.2, %zero), dimensions={1}, to_apply=%region_0
}

%fused_scale (param_0.5: f32[8]) -> bf16[8] {
  %param_0.5 = f32[8]{0} parameter(0)
  %half = f32[] constant(0.5)
  %broadcast.2 = f32[8]{0} broadcast(%half), dimensions={}
  %multiply.1 = f32[8]{0} multiply(%param_0.5, %broadcast.2)
  ROOT %convert.0 = bf16[8]{0} convert(%multiply.1)
}

%lhs (p.1: bf16[64,64]) -> bf16[64,64] {
  ROOT %p.1 = bf16[64,64]{1,0} parameter(0)
}

%gemm_computation (p.2: bf16[64,64], p.3: bf16[64,64]) -> bf16[64,64] {
  %p.2 = bf16[64,64]{1,0} parameter(0)
  %block_fusion = bf16[64,64]{1,0} fusion(%p.2), kind=kCustom, calls=%lhs
  %p.3 = bf16[64,64]{1,0} parameter(1)
  ROOT %dot.0 = bf16[64,64]{1,0} dot(%block_fusion, %p.3), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

%fused_transpose (param_0.1: bf16[64,32]) -> bf16[32,64] {
  %param_0.1 = bf16[64,32]{1,0} parameter(0)
  ROOT %transpose.1 = bf16[32,64]{1,0} transpose(%param_0.1), dimensions={1,0}
}

ENTRY %main (x: bf16[8,2048], w: bf16[64,64], y: bf16[64,32]) -> (bf16[8], bf16[64,64], bf16[32,64], bf16[64,64]) {
  %x = bf16[8,2048]{1,0} parameter(0)
  %w = bf16[64,64]{1,0} parameter(1)
  %y = bf16[64,32]{1,0} parameter(2)
  %input_reduce_fusion = f32[8]{0} fusion(%x), kind=kInput, calls=%fused_reduce
  %loop_convert_fusion = bf16[8]{0} fusion(%input_reduce_fusion), kind=kLoop, calls=%fused_scale
  %gemm_fusion_dot = bf16[64,64]{1,0} fusion(%w, %w), kind=kCustom, calls=%gemm_computation
  %loop_transpose_fusion = bf16[32,64]{1,0} fusion(%y), kind=kLoop, calls=%fused_transpose
  %custom-call.1 = (bf16[64,64]{1,0}, s8[1024]{0}) custom-call(%w, %w), custom_call_target="__cublas$gemm"
  %gte = bf16[64,64]{1,0} get-tuple-element(%custom-call.1), index=0
  %transpose.9 = bf16[64,64]{0,1} transpose(%gte), dimensions={1,0}
  ROOT %out = (bf16[8]{0}, bf16[64,64]{1,0}, bf16[32,64]{1,0}, bf16[64,64]{0,1}) tuple(%loop_convert_fusion, %gemm_fusion_dot, %loop_transpose_fusion, %transpose.9)
}
"""


def test_each_kernel_is_described_by_what_its_hlo_computes():
    works = {w.instruction: w for w in hlo.kernel_work([_module("jit_kernels(3)", KERNELS)])}
    described = {name: hlo.describe([work]) for name, work in works.items()}
    assert described["input_reduce_fusion"] == "f32 reduction (reduce; root reduce)"
    assert described["loop_convert_fusion"] == "element-wise f32 math converted to bf16 (multiply; root convert)"
    assert described["gemm_fusion_dot"] == "bf16 matmul (dot; root dot)"  # the nested fusion's parameter is no work
    assert described["loop_transpose_fusion"] == "no math, only data movement (transpose; root transpose)"
    assert described["custom-call.1"] == 'custom call "__cublas$gemm" returning bf16'
    assert described["transpose.9"] == "bf16 transpose"  # an op that runs as a kernel of its own
    assert not {"x", "gte", "out", "sum", "dot.0"} & set(works)  # parameters, tuples and fused ops run no kernel
    assert works["custom-call.1"].custom_call == "__cublas$gemm" and works["loop_convert_fusion"].module == (
        "jit_kernels(3)")
    assert hlo.describe([]) == ""


def _step_program(name: str, rate: str) -> str:
    return (f"HloModule {name}, entry_computation_layout={{(f32[4]{{0}})->f32[4]{{0}}}}\n\n"
            "ENTRY %main (p.1: f32[4]) -> f32[4] {\n"
            "  %p.1 = f32[4]{0} parameter(0)\n"
            f"  %c.2 = f32[] constant({rate})\n"
            "  %b.3 = f32[4]{0} broadcast(f32[] %c.2), dimensions={}\n"
            "  ROOT %m.4 = f32[4]{0} multiply(f32[4]{0} %p.1, f32[4]{0} %b.3)\n"
            "}\n")


def test_a_program_compiled_again_has_the_same_fingerprint_and_a_changed_constant_another():
    first = hlo.parse_module("jit__lambda(36)", _step_program("jit__lambda", "0.001"))
    again = hlo.parse_module("jit__lambda(38)", _step_program("jit__lambda.1", "0.001"))
    decayed = hlo.parse_module("jit__lambda(40)", _step_program("jit__lambda.2", "0.0009"))
    assert first.fingerprint and first.fingerprint == again.fingerprint
    assert decayed.fingerprint != first.fingerprint
    (program,) = hlo.program_buffers([first])
    assert program.fingerprint == first.fingerprint


SEGMENT_SUM = """HloModule jit_pool, entry_computation_layout={(f32[4096,64]{1,0}, s32[4096]{0})->f32[16,64]{1,0}}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%fused_scatter (p0: f32[16,64], p1: s32[4096,1], p2: f32[4096,64]) -> f32[16,64] {
  %p0 = f32[16,64]{1,0} parameter(0)
  %p1 = s32[4096,1]{1,0} parameter(1)
  %p2 = f32[4096,64]{1,0} parameter(2)
  %t = f32[4096,64]{1,0} tanh(%p2)
  ROOT %scatter.1 = f32[16,64]{1,0} scatter(%p0, %p1, %t), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}

ENTRY %main (x: f32[4096,64], ids: s32[4096]) -> f32[16,64] {
  %x = f32[4096,64]{1,0} parameter(0)
  %ids = s32[4096]{0} parameter(1)
  %r = s32[4096,1]{1,0} reshape(%ids)
  %z = f32[] constant(0)
  %zeros = f32[16,64]{1,0} broadcast(%z), dimensions={}
  ROOT %scatter_fusion = f32[16,64]{1,0} fusion(%zeros, %r, %x), kind=kLoop, calls=%fused_scatter
}
"""


def test_a_scatter_says_how_many_updates_go_into_each_element_it_updates():
    (work,) = [w for w in hlo.kernel_work([_module("jit_pool(4)", SEGMENT_SUM)]) if w.instruction == "scatter_fusion"]
    assert work.updates_per_element == 256.0  # 4096 rows summed into 16 segments
    assert hlo.describe([work]).startswith("f32 scatter of 256 updates per element")


def test_a_matmul_by_ids_equal_to_an_iota_says_how_many_classes_its_one_hot_has():
    (work,) = [w for w in hlo.kernel_work([_module("jit_lookup(5)", ONE_HOT_LOOKUP)]) if w.instruction == "fusion"]
    assert work.one_hot_classes == 8192
    assert "by a one-hot matrix of 8192 classes" in hlo.describe([work])
    # ids < iota is a mask, not a one-hot: its matmul is no lookup.
    (masked,) = [w for w in hlo.kernel_work([_module("jit_lookup(6)", ONE_HOT_LOOKUP.replace("direction=EQ",
                                                                                           "direction=LT"))])
                 if w.instruction == "fusion"]
    assert masked.one_hot_classes == 0


MOE_DISPATCH = """HloModule jit_moe

%fused_expert (p.e: s32[4096]) -> bf16[4096,8] {
  %p.e = s32[4096]{0} parameter(0)
  %b.e = s32[4096,8]{1,0} broadcast(%p.e), dimensions={0}
  %iota.e = s32[4096,8]{1,0} iota(), iota_dimension=1
  %eq.e = pred[4096,8]{1,0} compare(%b.e, %iota.e), direction=EQ
  ROOT %c.e = bf16[4096,8]{1,0} convert(%eq.e)
}

%fused_slot (p.s: s32[4096]) -> bf16[4096,640] {
  %p.s = s32[4096]{0} parameter(0)
  %b.s = s32[4096,640]{1,0} broadcast(%p.s), dimensions={0}
  %iota.s = s32[4096,640]{1,0} iota(), iota_dimension=1
  %eq.s = pred[4096,640]{1,0} compare(%b.s, %iota.s), direction=EQ
  ROOT %c.s = bf16[4096,640]{1,0} convert(%eq.s)
}

%fused_combine (p.0: bf16[4096,8], p.1: bf16[4096,640], p.2: bf16[4096], p.3: bf16[8,640,1024]) -> bf16[4096,1024] {
  %p.0 = bf16[4096,8]{1,0} parameter(0)
  %p.1 = bf16[4096,640]{1,0} parameter(1)
  %p.2 = bf16[4096]{0} parameter(2)
  %p.3 = bf16[8,640,1024]{2,1,0} parameter(3)
  %e.3 = bf16[4096,8,640]{2,1,0} broadcast(%p.0), dimensions={0,1}
  %s.3 = bf16[4096,8,640]{2,1,0} broadcast(%p.1), dimensions={0,2}
  %dispatch = bf16[4096,8,640]{2,1,0} multiply(%e.3, %s.3)
  %g.3 = bf16[4096,8,640]{2,1,0} broadcast(%p.2), dimensions={0}
  %combine = bf16[4096,8,640]{2,1,0} multiply(%dispatch, %g.3)
  ROOT %dot.3 = bf16[4096,1024]{1,0} dot(%combine, %p.3), lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}
}

ENTRY %main (expert: s32[4096], slot: s32[4096], gate: bf16[4096], outputs: bf16[8,640,1024]) -> bf16[4096,1024] {
  %expert = s32[4096]{0} parameter(0)
  %slot = s32[4096]{0} parameter(1)
  %gate = bf16[4096]{0} parameter(2)
  %outputs = bf16[8,640,1024]{2,1,0} parameter(3)
  %expert_one_hot = bf16[4096,8]{1,0} fusion(%expert), kind=kLoop, calls=%fused_expert
  %slot_one_hot = bf16[4096,640]{1,0} fusion(%slot), kind=kLoop, calls=%fused_slot
  %copy-start = (bf16[4096,640]{1,0}, bf16[4096,640]{1,0}, u32[]) copy-start(%slot_one_hot)
  %copy-done = bf16[4096,640]{1,0} copy-done(%copy-start)
  ROOT %fusion = bf16[4096,1024]{1,0} fusion(%expert_one_hot, %copy-done, %gate, %outputs), kind=kOutput, calls=%fused_combine
}
"""


def test_a_mixture_of_experts_dispatch_is_a_one_hot_of_expert_and_slot_scaled_by_its_gate():
    works = {w.instruction: w for w in hlo.kernel_work([_module("jit_moe(1)", MOE_DISPATCH)])}
    assert works["fusion"].one_hot_classes == 8 * 640  # through the chip's asynchronous copy of the slot one-hot
    # Multiplied by values of its own size (not one per row), it is no one-hot any more.
    dense = MOE_DISPATCH.replace("%g.3 = bf16[4096,8,640]{2,1,0} broadcast(%p.2), dimensions={0}",
                                 "%g.3 = bf16[4096,8,640]{2,1,0} exponential(%e.3)")
    assert {w.instruction: w for w in hlo.kernel_work([_module("jit_moe(2)", dense)])}["fusion"].one_hot_classes == 0


def _sliced_logits(slices: list[str]) -> str:
    """A matmul of every position by a vocabulary whose result only the given slices read."""
    reads = "\n".join(f"  %read.{n} = f32[8,{limit},32768]{{2,1,0}} slice(%logits), slice={{[0:8], [{start}:{stop}], "
                      f"[0:32768]}}" for n, (start, stop, limit) in enumerate(_ranges(slices)))
    outputs = ", ".join(f"%read.{n}" for n in range(len(slices)))
    return f"""HloModule jit_prefill

ENTRY %main (h: f32[8,1024,1024], w: f32[1024,32768]) -> f32[8,1,32768] {{
  %h = f32[8,1024,1024]{{2,1,0}} parameter(0)
  %w = f32[1024,32768]{{1,0}} parameter(1)
  %logits = f32[8,1024,32768]{{2,1,0}} dot(%h, %w), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}
{reads}
  ROOT %out = tuple({outputs})
}}
"""


def _gathered_logits(rows: int) -> str:
    """A matmul of every position by a vocabulary of which a gather keeps ``rows`` of 512 positions (a masked
    LM's masked positions), and its gradient: the kept rows' gradients scattered into zeros, relaid out, and
    multiplied at full size."""
    return f"""HloModule jit_mlm

%add (a: f32[], b: f32[]) -> f32[] {{
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}}

ENTRY %main (h: f32[8,512,64], w: f32[64,4096], idx: s32[8,{rows},2], g: f32[8,{rows},4096]) -> (f32[8,{rows},4096], f32[8,512,64], f32[4096,8,512]) {{
  %h = f32[8,512,64]{{2,1,0}} parameter(0)
  %w = f32[64,4096]{{1,0}} parameter(1)
  %idx = s32[8,{rows},2]{{2,1,0}} parameter(2)
  %g = f32[8,{rows},4096]{{2,1,0}} parameter(3)
  %logits = f32[8,512,4096]{{2,1,0}} dot(%h, %w), lhs_contracting_dims={{2}}, rhs_contracting_dims={{0}}
  %picked = f32[8,{rows},4096]{{2,1,0}} gather(%logits, %idx), offset_dims={{2}}, collapsed_slice_dims={{0,1}}, start_index_map={{0,1}}, index_vector_dim=2, slice_sizes={{1,1,4096}}
  %zero = f32[] constant(0)
  %zeros = f32[8,512,4096]{{2,1,0}} broadcast(%zero), dimensions={{}}
  %spread = f32[8,512,4096]{{2,1,0}} scatter(%zeros, %idx, %g), update_window_dims={{2}}, inserted_window_dims={{0,1}}, scatter_dims_to_operand_dims={{0,1}}, index_vector_dim=2, to_apply=%add
  %moved = f32[4096,8,512]{{2,1,0}} transpose(%spread), dimensions={{2,0,1}}
  %dh = f32[8,512,64]{{2,1,0}} dot(%spread, %w), lhs_contracting_dims={{2}}, rhs_contracting_dims={{1}}
  ROOT %out = (f32[8,{rows},4096], f32[8,512,64], f32[4096,8,512]) tuple(%picked, %dh, %moved)
}}
"""


@pytest.mark.parametrize(("rows", "per_kept"), [(76, 6), (512, 1)])
def test_a_matmul_result_of_which_a_gather_keeps_a_few_rows_is_computed_mostly_to_be_dropped(rows, per_kept):
    works = {w.instruction: w.computed_per_kept for w in hlo.kernel_work([_module("jit_mlm(1)", _gathered_logits(rows))])}
    # The logits, the gather that picks the kept rows out of them (gathering first leaves nothing to pick), the
    # zeros of their gradient, the scatter into them, its relayout and the matmul that reads it.
    assert [works[name] for name in ("logits", "picked", "zeros", "spread", "moved", "dh")] == [per_kept] * 6


def test_a_module_detector_that_raises_is_recorded_and_leaves_the_others_marks(monkeypatch):
    def broken(module):
        raise IndexError("tuple index out of range")

    monkeypatch.setitem(hlo._MODULE_DETECTORS, "recomputed_positions", broken)
    modules = [_module("jit_mlm(1)", _gathered_logits(76))]
    failures: dict[str, str] = {}
    works = {w.instruction: w for w in hlo.kernel_work(modules, failures)}
    assert failures == {"recomputed_positions in jit_mlm(1)": "IndexError: tuple index out of range"}
    assert works["logits"].computed_per_kept == 6 and works["logits"].flops  # the other detectors' marks remain
    with pytest.raises(IndexError):  # without a place to record it, a detector's bug is not hidden
        hlo.kernel_work(modules)


def test_a_kernel_that_computes_on_the_kept_elements_is_not_counted_with_those_that_pick_them():
    # Scaled after the gather, the kept rows are math that computing only them still does.
    scaled = _gathered_logits(76).replace(
        "  %zero = f32[] constant(0)\n",
        "  %zero = f32[] constant(0)\n  %half = f32[8,76,4096]{2,1,0} multiply(%picked, %picked)\n")
    works = {w.instruction: w.computed_per_kept for w in hlo.kernel_work([_module("jit_mlm(1)", scaled)])}
    assert (works["picked"], works["half"]) == (6, 1)


def test_a_kernel_reads_and_writes_its_operands_and_result_once_each():
    works = {w.instruction: w for w in hlo.kernel_work([_module("jit_mlm(1)", _gathered_logits(76))])}
    # logits: h [8,512,64] and w [64,4096] read, [8,512,4096] written, in f32; dh reads spread and w.
    assert works["logits"].bytes_accessed == 4 * (8 * 512 * 64 + 64 * 4096 + 8 * 512 * 4096)
    assert works["dh"].bytes_accessed == 4 * (8 * 512 * 4096 + 64 * 4096 + 8 * 512 * 64)


def _ranges(slices: list[str]) -> list[tuple[int, int, int]]:
    return [(int(a), int(b), int(b) - int(a)) for a, b in (s.split(":") for s in slices)]


@pytest.mark.parametrize(("slices", "per_kept"), [
    (["1023:1024"], 1024),  # the last position's logits only: a prefill's
    (["0:512"], 2),
    (["0:512", "0:512"], 2),  # the same window read twice is read once
    (["0:341", "341:682", "682:1024"], 1),  # a split into parts (q, k, v) reads everything
])
def test_a_matmul_result_read_only_through_small_slices_computes_more_than_is_read(slices, per_kept):
    works = {w.instruction: w for w in hlo.kernel_work([_module("jit_prefill(1)", _sliced_logits(slices))])}
    assert works["logits"].computed_per_kept == per_kept


_DECODE = """HloModule jit_decode, is_scheduled=true{alias}, entry_computation_layout={{(bf16[32,512,64]{{2,1,0}}, bf16[64]{{0}}, s32[])->(bf16[32,512,64]{{2,1,0}})}}

%fused_update (param_0.1: bf16[32,512,64], param_1.1: bf16[64], param_2.1: s32[]) -> bf16[32,512,64] {{
  %param_0.1 = bf16[32,512,64]{{2,1,0}} parameter(0)
  %convert.1 = f32[32,512,64]{{2,1,0}} convert(%param_0.1)
  %param_1.1 = bf16[64]{{0}} parameter(1)
  %convert.2 = f32[64]{{0}} convert(%param_1.1)
  %bitcast.1 = f32[1,1,64]{{2,1,0}} bitcast(%convert.2)
  %param_2.1 = s32[] parameter(2)
  %constant.1 = s32[] constant(0)
  %dynamic-update-slice.1 = f32[32,512,64]{{2,1,0}} dynamic-update-slice(%convert.1, %bitcast.1, %constant.1, %param_2.1, %constant.1)
  ROOT %convert.3 = bf16[32,512,64]{{2,1,0}} convert(%dynamic-update-slice.1)
}}

ENTRY %main (cache.1: bf16[32,512,64], x.1: bf16[64], position.1: s32[]) -> (bf16[32,512,64]) {{
  %cache.1 = bf16[32,512,64]{{2,1,0}} parameter(0)
  %x.1 = bf16[64]{{0}} parameter(1)
  %position.1 = s32[] parameter(2)
  %dynamic-update-slice_convert_fusion = bf16[32,512,64]{{2,1,0}} fusion(%cache.1, %x.1, %position.1), kind=kLoop, calls=%fused_update
  ROOT %tuple.1 = (bf16[32,512,64]{{2,1,0}}) tuple(%dynamic-update-slice_convert_fusion)
}}
"""


def test_an_argument_updated_in_place_into_an_output_without_being_donated_is_copied_whole_each_call():
    undonated = hlo.parse_module("jit_decode(3)", _DECODE.format(alias=""))
    assert hlo.undonated_updates(undonated) == {"cache.1": ["dynamic-update-slice_convert_fusion"]}
    (program,) = hlo.program_buffers([undonated])
    assert program.undonated == {"cache.1": ["dynamic-update-slice_convert_fusion"]}
    aliased = ", input_output_alias={ {0}: (0, {}, may-alias) }"
    donated = hlo.parse_module("jit_decode(3)", _DECODE.format(alias=aliased))
    assert donated.donated == {0} and hlo.undonated_updates(donated) == {}
    # Below a mebibyte the copy is noise: the same update of a small buffer is not named.
    small = hlo.parse_module("jit_decode(3)", _DECODE.format(alias="").replace("32,512,64", "32,8,64"))
    assert hlo.undonated_updates(small) == {}


TOP_K_AND_A_LOOKUP_GRADIENT = """HloModule jit_step

%fused_top_k (param_0.1: f32[256,1048576]) -> (f32[256,100], s32[256,100]) {
  %param_0.1 = f32[256,1048576]{1,0} parameter(0)
  ROOT %custom-call.2 = (f32[256,100]{1,0}, s32[256,100]{1,0}) custom-call(%param_0.1), custom_call_target="TopK"
}

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%fused_scatter (param_0.2: f32[65536,128], param_1.2: s32[1024,1], param_2.2: f32[1024,128]) -> f32[65536,128] {
  %param_0.2 = f32[65536,128]{1,0} parameter(0)
  %param_1.2 = s32[1024,1]{1,0} parameter(1)
  %param_2.2 = f32[1024,128]{1,0} parameter(2)
  ROOT %scatter.1 = f32[65536,128]{1,0} scatter(%param_0.2, %param_1.2, %param_2.2), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}

%fused_segments (param_0.3: f32[64,128], param_1.3: s32[1024,1], param_2.3: f32[1024,128]) -> f32[64,128] {
  %param_0.3 = f32[64,128]{1,0} parameter(0)
  %param_1.3 = s32[1024,1]{1,0} parameter(1)
  %param_2.3 = f32[1024,128]{1,0} parameter(2)
  ROOT %scatter.2 = f32[64,128]{1,0} scatter(%param_0.3, %param_1.3, %param_2.3), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%add
}

ENTRY %main (scores: f32[256,1048576], ids: s32[1024,1], rows: f32[1024,128], sums: f32[64,128], table: f32[65536,128]) -> (f32[256,100], f32[65536,128], f32[64,128]) {
  %scores = f32[256,1048576]{1,0} parameter(0)
  %ids = s32[1024,1]{1,0} parameter(1)
  %rows = f32[1024,128]{1,0} parameter(2)
  %sums = f32[64,128]{1,0} parameter(3)
  %table = f32[65536,128]{1,0} parameter(4)
  %top = (f32[256,100]{1,0}, s32[256,100]{1,0}) fusion(%scores), kind=kCustom, calls=%fused_top_k
  %values = f32[256,100]{1,0} get-tuple-element(%top), index=0
  %zero = f32[] constant(0)
  %zeros = f32[65536,128]{1,0} broadcast(%zero), dimensions={}
  %gradient = f32[65536,128]{1,0} fusion(%zeros, %ids, %rows), kind=kLoop, calls=%fused_scatter
  %segments = f32[64,128]{1,0} fusion(%sums, %ids, %rows), kind=kLoop, calls=%fused_segments
  ROOT %out = (f32[256,100]{1,0}, f32[65536,128]{1,0}, f32[64,128]{1,0}) tuple(%values, %gradient, %segments)
}
"""


def test_a_custom_call_inside_a_fusion_names_the_fusion_and_a_scatter_into_zeros_is_a_lookup_s_gradient():
    works = {w.instruction: w for w in hlo.kernel_work([_module("jit_step(4)", TOP_K_AND_A_LOOKUP_GRADIENT)])}
    assert hlo.describe([works["top"]]) == 'custom call "TopK" returning f32'
    # A gather's gradient: its rows scattered into zeros as large as the table.
    assert works["gradient"].scatters_into_constant == (65536, 128)
    assert works["gradient"].updates_per_element == 1024 / 65536
    # Rows summed into an array the program was given is not a gradient made from zeros.
    assert works["segments"].scatters_into_constant == ()
    # Without a table of that shape passed in, the zeros are the gradient of a gather from computed values (the
    # diagonal of a similarity matrix), which flows on into the backward pass: no table's.
    computed = TOP_K_AND_A_LOOKUP_GRADIENT.replace(", table: f32[65536,128])", ")").replace(
        "  %table = f32[65536,128]{1,0} parameter(4)\n", "")
    works = {w.instruction: w for w in hlo.kernel_work([_module("jit_step(4)", computed)])}
    assert works["gradient"].scatters_into_constant == ()
