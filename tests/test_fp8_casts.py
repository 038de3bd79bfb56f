"""torchao's FP8 casts of a GEMM's operands (`training.fp8` under `framework: fsdp`), measured:
one bf16 Float8Linear of torchao 0.18.0 on the CPU (groundtruth/fp8_casts.py, the profiler's
memory events), its bytes at each GEMM's start worked out by hand term by term, and tiersim's
count (state/fp8_casts.py) the casts among them.

The linear: M = 48 rows, K = 64 inputs, N = 160 outputs (multiples of 16, _scaled_mm's), so
the input is M·K = 3,072 values, the weight K·N = 10,240, the output and its gradient
M·N = 7,680: FP8 1 B a value, bf16 2 B, fp32 scales 4 B each.
"""

from __future__ import annotations

import pytest
from conftest import FIXTURES, scenario
from problem_lines import said

from tiersim.frameworks.assemble import ImportOptions, import_configs
from tiersim.state.fp8_casts import backward_cast_bytes, forward_cast_bytes
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events
from tiersim.workload.kernels import layer_kernels

M, K, N = 48, 64, 160
CASTS_PART = "FP8 casts of GEMM operands (torchao)"
MK, KN, MN = 48 * 64, 64 * 160, 48 * 160  # 3,072, 10,240, 7,680

# tiersim's count, by hand: each cast 1 B a value plus its fp32 scales
CASTS = {
    # forward: input MK + 4, weight KN + 4
    ("tensorwise", "forward"): (MK + 4) + (KN + 4),  # 13,320
    # backward: grad_input GEMM's gradient MN + 4 and weight KN + 4, held while the
    # grad_weight GEMM's gradient MN + 4 and input MK + 4 are cast
    ("tensorwise", "backward"): (MN + 4) + (KN + 4) + (MN + 4) + (MK + 4),  # 28,688
    # forward: input scaled a row (M scales), the weight's transpose a column (N)
    ("rowwise", "forward"): (MK + 4 * M) + (KN + 4 * N),  # 14,144
    # grad_input: gradient M scales, weight K; grad_weight: gradient N, input K
    ("rowwise", "backward"): (MN + 4 * M) + (KN + 4 * K) + (MN + 4 * N) + (MK + 4 * K),  # 30,016
    ("rowwise_with_gw_hp", "forward"): (MK + 4 * M) + (KN + 4 * N),  # 14,144, rowwise's
    # grad_input: gradient rowwise (M scales), weight tensorwise (one); grad_weight in bf16
    ("rowwise_with_gw_hp", "backward"): (MN + 4 * M) + (KN + 4),  # 18,116
}


@pytest.fixture(scope="module")
def measured():
    pytest.importorskip("torchao.float8")
    from tiersim.groundtruth.fp8_casts import float8_linear_memory

    recipes = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
    return {r: float8_linear_memory(r, M, K, N) for r in recipes}


@pytest.mark.parametrize(("recipe", "phase"), sorted(CASTS))
def test_tiersim_counts_each_recipes_casts(recipe, phase):
    count = forward_cast_bytes if phase == "forward" else backward_cast_bytes
    assert count(recipe, M, K, N) == CASTS[recipe, phase]


def test_measured_tensorwise(measured):
    """At each GEMM's start, beside the casts: the inverse scales (`a_scale.reciprocal()`,
    4 B each); the grad_input GEMM's weight copied column-major (`preprocess_addmm`:
    `b.t().contiguous().t()`, KN x 1 B); at the grad_weight GEMM the grad_input GEMM's bf16
    output (MK x 2 B, tiersim's backward transients count it) and both operands' layout
    copies (the gradient's transpose made row-major, MN; the input made column-major, MK)."""
    fwd, bwd = measured["tensorwise"].forward, measured["tensorwise"].backward
    inverse = 4 + 4
    assert fwd.gemm_entries == (CASTS["tensorwise", "forward"] + inverse,)  # 13,328
    grad_input = (MN + 4) + (KN + 4) + KN + inverse  # 28,176
    grad_weight = CASTS["tensorwise", "backward"] + 2 * MK + MN + MK + inverse  # 45,592
    assert bwd.gemm_entries == (grad_input, grad_weight)


def test_measured_rowwise(measured):
    """Rowwise: the inverse scales (M + N fp32 forward); the backward's GEMMs run without
    fast accumulation, so `addmm_float8_unwrapped` multiplies the output by the two scales'
    outer product after a tensorwise GEMM: an fp32 product of the output's shape (grad_input
    M x K, grad_weight N x K, 4 B a value) and two 4 B unit scales, beside the layout copies."""
    fwd, bwd = measured["rowwise"].forward, measured["rowwise"].backward
    assert fwd.gemm_entries == (CASTS["rowwise", "forward"] + 4 * (M + N),)  # 14,976
    grad_input = (MN + 4 * M) + (KN + 4 * K) + KN + 4 * MK + 8  # 40,904
    grad_weight = CASTS["rowwise", "backward"] + 2 * MK + MN + MK + 4 * KN + 8  # 87,880
    assert bwd.gemm_entries == (grad_input, grad_weight)


def test_measured_rowwise_with_gw_hp(measured):
    """rowwise_with_gw_hp: rowwise's forward; the grad_input GEMM mixes a rowwise gradient
    with a tensorwise weight, whose scale torchao repeats along the output (K x 4 B) to call
    the rowwise kernel; the grad_weight GEMM is a bf16 mm of the bf16 gradient and input:
    only the grad_input GEMM's casts and its bf16 output are there when it starts."""
    fwd, bwd = measured["rowwise_with_gw_hp"].forward, measured["rowwise_with_gw_hp"].backward
    assert fwd.gemm_entries == (CASTS["rowwise_with_gw_hp", "forward"] + 4 * (M + N),)
    grad_input = (MN + 4 * M) + (KN + 4) + KN + 4 * K + 4 * MK + 8  # 40,908
    grad_weight = CASTS["rowwise_with_gw_hp", "backward"] + 2 * MK  # 24,260
    assert bwd.gemm_entries == (grad_input, grad_weight)


def test_measured_eager_casts_work_in_fp32(measured):
    """Not counted: each eager cast's fp32 working set (`x.to(float32) * scale` and its
    clamp, 4 + 4 B a value, live as the 1 B result is written, beside the 4 B scale): the
    forward peaks while the weight is cast, the input's cast MK + 4 held, 95,240 B against
    the 13,320 B of casts; the backward while the weight is cast for grad_input, beside the
    gradient's cast MN + 4. torch.compile fuses each cast into one kernel."""
    fwd, bwd = measured["tensorwise"].forward, measured["tensorwise"].backward
    weight_cast_working = 4 + (4 + 4 + 1) * KN  # scale, fp32 product, clamp, FP8 result
    assert fwd.peak_bytes == (MK + 4) + weight_cast_working  # 95,240
    assert bwd.peak_bytes == (MN + 4) + weight_cast_working  # 99,848


# --- the recipe rowwise_with_gw_hp: its timing -------------------------------------------------

T = 1e12
HBM = 3.35e12 * 0.90  # dgx-h100's HBM x memory_efficiency
# Llama 2 7B's four linears on one GPU, (M, N, K), as in test_fp8.py: QKV, output, gated FC1,
# FC2; each weight gradient's GEMM (K x M)·(M x N) at or past the H100 table's 4096 edge
LINEARS = [(4096, 12288, 4096), (4096, 4096, 4096), (4096, 22016, 4096), (4096, 4096, 11008)]
FLOPS = sum(2 * m * n * k for m, n, k in LINEARS)
# held at the sustained ceilings (h100-sxm.yaml, 0.888): BF16 0.888 x 794.5, FP8 (rowwise's
# share 1.0 of tensorwise's) 0.888 x 1402.6 TFLOP/s
BF16, FP8 = 705.516 * T, 1245.5088 * T


def _llama7b_fsdp(recipe: str):
    training = {"seq_len": 4096, "micro_batch_size": 1, "fp8": {"recipe": recipe}}
    training |= {"framework": "fsdp", "implementation": "torchtitan"}
    raw = {"name": "f", "model": {"preset": "llama-2-7b"}, "training": training}
    raw["hardware"] = {"preset": "dgx-h100"}
    raw["parallel"] = {"data": 8, "zero_stage": 3}
    return resolve(scenario(raw))


def test_rowwise_with_gw_hp_runs_the_weight_gradients_gemm_in_bf16():
    """torchao's rowwise_with_gw_hp: output and grad_input GEMMs at rowwise's FP8 rate, the
    weight gradient's GEMM in bf16 (`grad_weight_hp = input_t_hp @ grad_output_hp`,
    torchao/float8/config.py); its quantize kernels cast the input and the gradient once
    (3 B a value), the weight twice (rowwise 3 B, tensorwise with its amax pass 5 B), where
    rowwise casts all three twice, 6 B a value each."""
    rw, hp = _llama7b_fsdp("rowwise"), _llama7b_fsdp("rowwise_with_gw_hp")
    krw, khp = layer_kernels(rw, rw.model), layer_kernels(hp, hp.model)
    assert khp.forward.gemm_s == pytest.approx(krw.forward.gemm_s)
    assert khp.backward.gemm_s - krw.backward.gemm_s == pytest.approx(FLOPS / BF16 - FLOPS / FP8)
    inputs = sum(m * k for m, _, k in LINEARS)
    weights = sum(k * n for _, n, k in LINEARS)  # every micro-batch under torchao
    grads = sum(m * n for m, n, _ in LINEARS)
    forward = (3 * inputs + 8 * weights) - 6 * (inputs + weights)
    assert khp.forward.memory_s - krw.forward.memory_s == pytest.approx(forward / HBM)
    assert khp.backward.memory_s - krw.backward.memory_s == pytest.approx((3 - 6) * grads / HBM)


def test_rowwise_with_gw_hp_is_torchaos_alone(cli, write):
    """Transformer Engine has no such recipe: under Megatron it is refused (exit 2)."""
    raw = {"name": "x", "model": {"preset": "llama-2-7b"}}
    raw["training"] = {"framework": "megatron", "fp8": {"recipe": "rowwise_with_gw_hp"}}
    file = write(raw)
    code, _, err = cli("validate", file)
    assert code == 2 and "Traceback" not in err
    assert said(err.strip(), file).coded == ("E-CONFLICT", "training.fp8.recipe")
    raw["training"] |= {"framework": "fsdp", "implementation": "torchtitan"}
    raw["parallel"] = {"data": 8, "zero_stage": 3}
    assert cli("validate", write(raw))[0] == 0


def test_torchtitans_recipe_name_rowwise_with_gw_hp_is_imported(tmp_path):
    """torchtitan's `[float8] recipe_name` names torchao's recipe (Float8LinearRecipeName)."""
    text = (FIXTURES / "frameworks" / "llama3_8b.toml").read_text()
    text = text.replace('# converters = "float8"', 'converters = ["float8"]')
    text = text.replace("[float8]\n", '[float8]\nrecipe_name = "rowwise_with_gw_hp"\n')
    path = tmp_path / "llama3_8b_float8.toml"
    path.write_text(text)
    s = import_configs([path], ImportOptions(gpus=64, hardware="dgx-h100")).loaded.scenario
    assert s.training.fp8 is not None and s.training.fp8.recipe == "rowwise_with_gw_hp"


def test_llama2_7b_layers_casts_in_the_timeline():
    """Llama-2-7B (h 4096, f 11008) under FSDP2 on 8 H100s, seq_len 4096, two sequences:
    M = 8,192 tokens. Forward: the down projection's (K f -> N h) input and weight,
    8192·11008 + 11008·4096 + 2 x 4 = 135,266,312 B; backward: gate's or up's (K h -> N f)
    gradient twice, input and weight, 2 x 8192·11008 + 8192·4096 + 4096·11008 + 4 x 4 =
    258,998,288 B (docs/fp8.md's 259.00 MB)."""
    training = {"seq_len": 4096, "micro_batch_size": 2, "fp8": {"recipe": "tensorwise"}}
    training |= {"framework": "fsdp", "implementation": "torchtitan", "recompute": "full"}
    raw = {"name": "f", "model": {"preset": "llama-2-7b"}, "training": training}
    raw |= {"hardware": {"preset": "dgx-h100"}, "parallel": {"data": 8, "zero_stage": 3}}
    r = resolve(scenario(raw))
    events = build_events(r, build_inventory(r), 0)
    casts = {(e.phase, e.nbytes) for e in events if e.part == CASTS_PART and e.alloc}
    assert casts == {("forward", 135_266_312), ("backward", 258_998_288)}
