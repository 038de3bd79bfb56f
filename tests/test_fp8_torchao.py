"""FP8 under `framework: fsdp` (torchtitan's float8 converter, torchao's Float8Linear): what
each recipe keeps of a linear weight in FP8, measured on torchao 0.18.0 on CPU and worked by
hand against tiersim's timeline (state/fp8.py `recast_per_pass`, docs/fp8.md)."""

from __future__ import annotations

import contextlib
import gc
import warnings

import pytest
from conftest import scenario
from problem_lines import said

from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events, gpu_timeline

FP8 = "FP8 weight copies (training.fp8)"  # Transformer Engine's cached copies
CASTS = "FP8 casts of GEMM operands (torchao)"
# a Llama-like layer: q, k, v, o 64 x 64 (4,096 values), gate, up, down 64 x 128 (8,192)
TINY = {
    "hidden": 64,
    "layers": 2,
    "heads": 4,
    "ffn_hidden": 128,
    "vocab": 1024,
    "norm": "rmsnorm",
    "position": "rope",
    "gated_mlp": True,
    "tied_embeddings": False,
}
PRECISION = {"weights": "fp32", "gradients": "fp32", "master": "none", "optimizer": "fp32"}
# torchao's casts live at once in a layer (state/fp8_casts.py, measured in test_fp8_casts.py),
# M = 128 tokens (seq_len 128, one sequence): its largest linear's, the down projection's
# (K 128 -> N 64) forward, gate's or up's (K 64 -> N 128) backward; 1 B a value, fp32 scales
# forward: input M·K + weight K·N; backward: gradient M·N + weight K·N (grad_input GEMM) held
# beside gradient M·N + input M·K (grad_weight GEMM)
LIVE = {
    # forward 128·128 + 4 + 128·64 + 4; backward 2 x 128·128 + 128·64 + 64·128 + 4 x 4
    "tensorwise": (16_384 + 8_192 + 8, 2 * 16_384 + 8_192 + 8_192 + 16),  # 24,584, 49,168
    # forward: scales a row of the input (128), a column of the weight (64); backward:
    # gradient 128 and 128 (grad_input, grad_weight), weight 64, input 64
    "rowwise": (
        16_384 + 4 * 128 + 8_192 + 4 * 64,  # 25,344
        (16_384 + 4 * 128) + (8_192 + 4 * 64) + (16_384 + 4 * 128) + (8_192 + 4 * 64),  # 50,688
    ),
    # rowwise's forward; backward the grad_input GEMM's alone, its weight tensorwise (one
    # scale): the grad_weight GEMM runs in bf16
    "rowwise_with_gw_hp": (25_344, (16_384 + 4 * 128) + (8_192 + 4)),  # 25,092
    # the prototype: the largest weight's cast alone, 8,192 B and a 1-byte scale a 32 values
    "mxfp8": (8_192 + 8_192 // 32, 8_192 + 8_192 // 32),
}


def _events(recipe: str, zero: int, recompute: str = "none", param_gather: bool = False):
    training = {"seq_len": 128, "precision": {**PRECISION, "compute": "bf16"}, "workspace": "0 B"}
    training |= {"framework": "fsdp", "implementation": "torchtitan", "recompute": recompute}
    training["fp8"] = {"recipe": recipe, "param_gather": param_gather}
    raw = {"name": "tiny", "model": TINY, "training": training}
    raw["parallel"] = {"data": 2, "zero_stage": zero}
    raw["hardware"] = {"gpu": {"kernels": None}}  # every recipe taken (memory needs no rate)
    r = resolve(scenario(raw))
    inv = build_inventory(r)
    return build_events(r, inv, 0), gpu_timeline(r, inv)


@pytest.mark.parametrize("recipe", sorted(LIVE))
@pytest.mark.parametrize(("zero", "recompute"), [(3, "none"), (1, "none"), (3, "full")])
def test_torchao_casts_each_layers_gemm_operands_and_frees_them_with_the_pass(
    recipe, zero, recompute
):
    """Each layer's forward casts its GEMMs' operands and frees them at once; its backward
    casts again, freed with the layer's backward (LIVE); nothing at the start of the step (no
    step-long cache under ZeRO 1 either) and nothing held from a layer's forward to its
    backward (TE's two layouts of every weight were, 2 x 4 x 4,100 + 2 x 3 x 8,196 = 81,976 B
    a layer tensorwise)."""
    events, t = _events(recipe, zero, recompute)
    assert not [e for e in events if e.part == FP8 and e.nbytes]
    fp8 = [(e.moment, e.alloc, e.nbytes) for e in events if e.part == CASTS and e.nbytes]
    layer = [
        ("forward: layer {i}", True),
        ("forward: layer {i}", False),
    ]
    want = [(m.format(i=i), a) for i in (0, 1) for m, a in layer]
    want += [(f"backward: layer {i}", a) for i in (1, 0) for a in (True, False)]
    assert [(m, a) for m, a, _ in fp8] == want
    forward, backward = LIVE[recipe]
    assert [n for m, a, n in fp8 if a] == [forward, forward, backward, backward]
    assert t.peak_parts.get(CASTS, 0) in (0, forward, backward)


def test_torchao_fp8_all_gather_casts_no_weight():
    """Under torchao's FP8 all-gather the gathered weight is already FP8
    (`tensor_already_casted_to_fp8`): only the activations' casts, tensorwise: forward the
    down projection's input 128·128 + 4; backward gate's gradient twice and its input,
    2 x (128·128 + 4) + 128·64 + 4."""
    events, _ = _events("tensorwise", 3, param_gather=True)
    live = [e.nbytes for e in events if e.part == CASTS and e.alloc]
    assert live == [16_388, 16_388, 40_972, 40_972]


def test_transformer_engine_keeps_both_layouts_of_every_weight_all_step():
    """Megatron's TE cache is unchanged: both layouts of every linear weight, tensorwise one
    fp32 scale each: 2 layers x (4 x 2 x 4,100 + 3 x 2 x 8,196) = 163,952 B from the start."""
    events, _ = _events("tensorwise", 1)  # fsdp: none at the start
    assert not [e for e in events if e.part == FP8 and e.moment == "start of the step" and e.nbytes]
    training = {"seq_len": 128, "precision": {**PRECISION, "compute": "bf16"}, "workspace": "0 B"}
    training["fp8"] = {"recipe": "tensorwise"}
    raw = {"name": "tiny", "model": TINY, "training": training}
    raw["hardware"] = {"gpu": {"kernels": None}}
    r = resolve(scenario(raw))
    te = [e for e in build_events(r, build_inventory(r), 0) if e.part == FP8]
    assert [(e.moment, e.nbytes) for e in te] == [("start of the step", 163_952)]


# --- measured: torchao 0.18.0's Float8Linear on CPU (torch._scaled_mm runs there) ---------------


@contextlib.contextmanager
def _objects_made_inside():
    """gc's walks inside see only the objects made inside: every object alive before is frozen
    (gc.freeze: moved to the permanent generation, which gc.collect and gc.get_objects leave
    out) and unfrozen after. Other tests' tensors are not looked at, and in a process that has
    imported torch, transformers and most of tiersim each walk costs a few milliseconds, not
    a second (walking the whole heap: 4.8-5.6 s a case in the suite, docs/suite-time.md).
    Nothing else in the test process freezes (only the sweep's pool workers do)."""
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _fp8_tensors(torch, f8) -> list:
    """FP8 tensors Python can reach made inside _objects_made_inside: torchao's
    Float8TrainingTensor or a raw FP8 dtype."""
    fp8 = (torch.float8_e4m3fn, torch.float8_e5m2)
    gc.collect()
    with warnings.catch_warnings():  # gc meets deprecated torch.distributed names
        warnings.simplefilter("ignore")
        objs = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
    return [o for o in objs if isinstance(o, f8) or o.dtype in fp8]


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise", "rowwise_with_gw_hp"])
def test_measured_float8_linear_saves_its_bf16_input_and_its_weight_no_fp8_copy(recipe):
    """Two bf16 linears 64 -> 128 -> 64 under torchao's recipe, 32 rows: what autograd saves
    (saved_tensors_hooks) is each linear's bf16 input and a view of its own weight parameter,
    no FP8 tensor; no FP8 tensor is alive between forward and backward nor after it (none to
    carry to the next micro-batch). Saved: inputs 32 x 64 x 2 B = 4,096 and 32 x 128 x 2 B =
    8,192; weights 64 x 128 x 2 B = 16,384 each, the parameters' own storage."""
    torch = pytest.importorskip("torch")
    ao = pytest.importorskip("torchao.float8")
    from torchao.float8.float8_training_tensor import Float8TrainingTensor

    with _objects_made_inside():  # not other tests'
        _float8_linears_step(torch, ao, recipe, Float8TrainingTensor)


def _float8_linears_step(torch, ao, recipe: str, Float8TrainingTensor) -> None:
    torch.manual_seed(0)
    lin = [torch.nn.Linear(64, 128, bias=False), torch.nn.Linear(128, 64, bias=False)]
    model = torch.nn.Sequential(*lin).to(torch.bfloat16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = ao.Float8LinearConfig.from_recipe_name(recipe)
        ao.convert_to_float8_training(model, config=config)
    x = torch.randn(32, 64, dtype=torch.bfloat16, requires_grad=True)
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = model(x)
    assert [type(m).__name__ for m in model] == ["Float8Linear", "Float8Linear"]
    assert [(t.dtype, t.untyped_storage().nbytes()) for t in saved] == [
        (torch.bfloat16, 4_096),  # first linear's input
        (torch.bfloat16, 16_384),  # its weight, transposed view
        (torch.bfloat16, 8_192),  # second linear's input
        (torch.bfloat16, 16_384),  # its weight
    ]
    weights = {m.weight.untyped_storage().data_ptr() for m in model}
    assert {saved[1].untyped_storage().data_ptr(), saved[3].untyped_storage().data_ptr()} == weights
    assert not [t for t in saved if isinstance(t, Float8TrainingTensor)]
    assert _fp8_tensors(torch, Float8TrainingTensor) == []  # forward done, backward to come
    y.float().sum().backward()
    saved.clear()
    assert _fp8_tensors(torch, Float8TrainingTensor) == []  # between micro-batches
    assert all(m.weight.grad is not None for m in model)


def test_torchao_fp8_all_gather_keeps_the_shards_unquantized():
    """torchao's `enable_fsdp_float8_all_gather` (`param_gather` under fsdp) casts each shard
    to FP8 for the all-gather only (WeightWithDynamicFloat8CastTensor wraps the fp32 shard):
    the resident weights stay fp32. TINY: embedding and head 2 x 1,024 x 64 = 131,072, final
    norm 64, two layers of 4 x 4,096 + 3 x 8,192 + 2 x 64 = 41,088: 213,312 values x 4 B =
    853,248 B, ZeRO-3 over 2 GPUs: 426,624 B a GPU (Megatron's param_gather would keep the
    linears in FP8)."""
    training = {"seq_len": 128, "precision": {**PRECISION, "compute": "bf16"}}
    training |= {"framework": "fsdp", "implementation": "torchtitan"}
    training["fp8"] = {"recipe": "tensorwise", "param_gather": True}
    raw = {"name": "tiny", "model": TINY, "training": training}
    raw["parallel"] = {"data": 2, "zero_stage": 3}
    raw["hardware"] = {"gpu": {"kernels": None}}
    inv = build_inventory(resolve(scenario(raw)))
    assert inv.per_gpu["weights"] == 426_624


def test_torchao_fp8_all_gather_with_rowwise_is_refused(cli, write):
    """torchao 0.18.0's Float8LinearConfig asserts "enable_fsdp_float8_all_gather only
    supports tensorwise scaling granularity": no such run exists."""
    training = {"framework": "fsdp", "implementation": "torchtitan"}
    training["fp8"] = {"recipe": "rowwise", "param_gather": True}
    raw = {"name": "x", "model": {"preset": "llama-2-7b"}, "training": training}
    raw["parallel"] = {"data": 2, "zero_stage": 3}
    file = write(raw)
    code, _, err = cli("validate", file)
    assert code == 2 and "Traceback" not in err
    assert said(err.strip(), file).coded == ("E-CONFLICT", "training.fp8.param_gather")
    assert "tensorwise" in err
    raw["training"]["fp8"]["recipe"] = "tensorwise"
    assert cli("validate", write(raw))[0] == 0
