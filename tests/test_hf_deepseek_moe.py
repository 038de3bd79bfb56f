"""DeepSeek-V3's MoE block as transformers 5 DeepseekV3MoE keeps it (the grouped sigmoid
router, the routed experts fused into one DeepseekV3Experts module on grouped_mm, shared
experts without a gate), measured here on the CPU against the `huggingface` accounting
(tiersim.state.activations_moe.deepseek_moe_mlp), and `tiersim measure` building DeepSeek-V3.

The measurement is hfmodels.SavedStorages' (saved_tensors_hooks, each storage once, parameters
and buffers left out), taken while the forward's output is alive and forgetting what the graph
already let go (the router's group selection is off the loss's path). The model: a tiny
DeepseekV3ForCausalLM (random weights, nothing downloaded) with latent attention, layer 0 dense
(first_k_dense_replace 1), layer 1 MoE: 16 routed experts of width 40 in 4 groups, 4 a token
within the best 2 groups, 2 shared experts; in the training dtype as `from_pretrained` loads it
(the router's weight fp32).
"""

from __future__ import annotations

import itertools

import pytest
from conftest import scenario

torch = pytest.importorskip("torch", reason="needs PyTorch (the `measure` extra)")
transformers = pytest.importorskip("transformers", reason="needs transformers (`measure` extra)")

from tiersim.groundtruth import hfmodels  # noqa: E402
from tiersim.state.activations import (  # noqa: E402
    Accounting,
    layer_bytes,
    layer_items,
    outside_items,
)
from tiersim.state.model import build_model  # noqa: E402

H, E, K, F, V = 64, 16, 4, 40, 128
DEEPSEEK = {
    "layers": 2, "hidden": H, "heads": 4, "ffn_hidden": 96, "vocab": V, "max_positions": 64,
    "norm": "rmsnorm", "position": "rope", "gated_mlp": True, "tied_embeddings": False,
    "q_lora_rank": 20, "kv_lora_rank": 24, "qk_rope_head_dim": 8, "qk_nope_head_dim": 16,
    "v_head_dim": 12, "experts": E, "experts_per_token": K, "expert_ffn_hidden": F,
    "shared_experts": 2, "expert_groups": 4, "expert_groups_per_token": 2,
    "first_dense_layers": 1,
}  # fmt: skip
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _model():
    return build_model(scenario({"name": "ds", "model": DEEPSEEK}).model)


def _acc(kernel: str, dtype: str) -> Accounting:
    return Accounting("huggingface", kernel, 0.0, 0.0, 4 if dtype == "fp32" else 2, device="cpu")


def _saved(net, b: int, s: int) -> tuple[list[int], int]:
    saved = hfmodels.SavedStorages(2, [*net.parameters(), *net.buffers()])
    handles = saved.watch(hfmodels.layers_of(net))
    ids = torch.randint(0, V, (b, s))
    with torch.autograd.graph.saved_tensors_hooks(saved.pack, saved.unpack):
        out = net(input_ids=ids, labels=ids, use_cache=False)
    saved.drop_freed()  # while `out` holds the graph
    del out
    for h in handles:
        h.remove()
    return saved.per_layer, saved.outside


@pytest.mark.parametrize(("kernel", "dtype"), list(itertools.product(["eager", "sdpa"], DTYPES)))
def test_measured_equals_predicted(kernel, dtype):
    """Both layers (dense, MoE) and outside them, at (s, b) = (32, 1) and (16, 2)."""
    torch.set_num_threads(1)
    m, acc = _model(), _acc(kernel, dtype)
    assert hfmodels.family_of(m, None) == "deepseek_v3"
    torch.manual_seed(0)
    net = hfmodels.build(m, "deepseek_v3", acc, 32, DTYPES[dtype])
    for s, b in [(32, 1), (16, 2)]:
        torch.manual_seed(1)
        per_layer, outside = _saved(net, b, s)
        assert per_layer == [layer_bytes(m, s, b, acc, index=i) for i in range(2)], (s, b)
        assert sum(i.nbytes for i in outside_items(m, s, b, acc)) == outside, (s, b)


def test_bf16_moe_block_by_hand():
    """bf16, s = 16, b = 2: T = 32 tokens, R = 4 x 32 = 128 routed rows. The router: its fp32
    input 4·32·64 = 8,192 (and the bf16 MLP input the shared experts keep, 2·32·64 = 4,096),
    sigmoid scores 4·32·16 = 2,048, top-k indices and weights 12·32·4 = 1,536, their sum 4·32
    = 128; dispatch: sort order, token rows, inverse order 24·128 = 3,072, rows per expert
    4·16 = 64; per row: dispatched 2·128·64 = 16,384, gate/up, SiLU and product
    4·2·128·40 = 40,960, outputs 16,384, routing weight 4·128 = 512; shared experts (width
    2 x 40 = 80): 4·2·32·80 = 20,480. The group selection keeps nothing for backward."""
    want = 8192 + 4096 + 2048 + 1536 + 128 + 3072 + 64 + 16384 + 40960 + 16384 + 512 + 20480
    items = layer_items(_model(), 16, 2, _acc("sdpa", "bf16"), index=1)
    assert sum(i.nbytes for i in items if i.group == "mlp") == want == 113_856


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_measure_builds_deepseek_v3_and_every_class_equals_the_prediction(dtype):
    """`tiersim measure --implementation huggingface` builds DeepseekV3ForCausalLM: weights
    (the router's fp32 in bf16 too), gradients, AdamW state and saved activations equal to
    the byte, the whole step's peak within 3 %."""
    from tiersim.groundtruth.measure import Request, measure

    req = Request(model=DEEPSEEK, seq_len=32, micro_batch_size=2, dtype=dtype, device="cpu",
                  implementation="huggingface")  # fmt: skip
    m = measure(req)
    assert m.family == "deepseek_v3"
    assert m.measured == m.predicted
    assert abs(m.predicted_peak_bytes / m.peak_allocated_bytes - 1) <= 0.03


def test_the_router_weight_is_counted_in_fp32():
    """bf16 weights: the router (16 x 64 = 1,024 values) at 4 B, the rest at 2 B; its gradient
    and AdamW moments (bf16 optimizer precision) in fp32 too, as PyTorch makes them."""
    from tiersim.state.inventory import dense_inventory
    from tiersim.state.resolved import resolve

    bf16 = {"weights": "bf16", "gradients": "bf16", "master": "none", "optimizer": "bf16"}
    training = {"implementation": "huggingface", "precision": bf16, "seq_len": 32}
    raw = {"name": "ds", "model": DEEPSEEK, "training": training}
    r = resolve(scenario(raw))
    params = r.model.parameters
    got = dense_inventory(r, r.model)
    assert got["weights"] == 2 * params + 2 * 1024
    assert got["gradients"] == 2 * params + 2 * 1024
    assert got["optimizer"] == 2 * 2 * params + 2 * 4 * 1024 - 2 * 2 * 1024
    raw["training"]["implementation"] = "megatron"  # Megatron keeps it in the weights' dtype
    got = dense_inventory(*(lambda r: (r, r.model))(resolve(scenario(raw))))
    assert got["weights"] == 2 * params


def test_zero3_gathers_the_fused_experts_module_whole():
    """transformers 5 holds a layer's routed experts as one module (DeepseekV3Experts:
    gate_up_proj E x 2F x H and down_proj E x H x F), which DeepSpeed's submodule fetch
    gathers whole beyond max_live_parameters: 16 x 3 x 40 x 64 = 122,880 values in bf16; its
    largest tensor, the one ZeRO reduces whole, is the fused gate_up_proj."""
    from tiersim.state.layer_memory import layer_memory
    from tiersim.state.resolved import resolve

    cfg = hfmodels.hf_config(_model(), "deepseek_v3", _acc("sdpa", "bf16"), 32)
    with torch.device("meta"):
        experts = transformers.DeepseekV3ForCausalLM(cfg).model.layers[1].mlp.experts
    assert sum(p.numel() for p in experts.parameters()) == 16 * 3 * 40 * 64
    bf16 = {"weights": "bf16", "gradients": "bf16", "master": "none", "optimizer": "bf16"}
    training = {"implementation": "huggingface", "framework": "deepspeed", "precision": bf16}
    training |= {"seq_len": 32, "offload": {"max_live_parameters": 50_000}}
    raw = {"name": "ds", "model": DEEPSEEK, "training": training}
    raw["parallel"] = {"data": 2, "zero_stage": 3}
    layers = layer_memory(resolve(scenario(raw)), 0)
    assert [lay.module for lay in layers] == [0, 16 * 3 * 40 * 64]
    # ZeRO reduces each gradient as one tensor: the fused gate_up_proj's is 16 x 80 x 64
    assert experts.gate_up_proj.numel() == layers[1].largest == 16 * 2 * 40 * 64


def test_the_deepseek_v3_scenario_is_accepted_under_huggingface():
    """The shipped DeepSeek-V3 scenario under transformers' code (no MTP, which transformers
    does not build; full recompute in place of Megatron-Core's modules): accounted, and its
    MoE layers hold the grouped router's items."""
    from tiersim.config.load import load_scenario

    sets = ["training.implementation=huggingface", "training.recompute=full",
            "training.recompute_modules=null", "model.mtp_layers=0"]  # fmt: skip
    s = load_scenario("scenarios/deepseek-v3-pp16-vp2.yaml", sets).scenario
    m = build_model(s.model)
    names = [i.name for i in layer_items(m, 4096, 1, _acc("sdpa", "bf16"), index=3)]
    assert "router sigmoid scores (fp32)" in names
    assert m.moe.groups == 8 and m.moe.group_topk == 4


def test_step_peak_with_full_recompute_in_fp32():
    """The whole step with every layer recomputed (fp32, seq 64): the peak is the MoE layer's
    backward, within 3 % of the profiler's (its routed experts' backward moments and bf16:
    tests/test_hf_moe_backward.py)."""
    from tiersim.groundtruth.step_timeline import compare_step

    fp32 = {k: "fp32" for k in ("weights", "gradients", "optimizer")} | {"master": "none"}
    training = {"seq_len": 64, "precision": fp32, "workspace": "0 B", "recompute": "full"}
    training |= {"implementation": "huggingface", "attention_kernel": "sdpa"}
    c = compare_step(scenario({"name": "ds", "model": DEEPSEEK, "training": training}), "fp32")
    assert abs(c.peak_error) <= 0.03, (c.measured, c.predicted)
    assert c.predicted.peak_phase == c.measured.peak_phase == "backward"
    assert c.timeline.peak_event.moment == "backward: layer 1"


def test_a_deepseek_v3_config_json_gives_its_router_groups():
    """n_group and topk_group as given (absent: DeepseekV3Config's 8 and 4); where the groups
    cannot route (12 experts in 8 groups: transformers' view fails), none are set and the
    huggingface accounting refuses the MoE, while the parameters stay as counted."""
    from tiersim.config.hffamilies import read_family

    dims = {"model_type": "deepseek_v3", "n_routed_experts": 16, "num_experts_per_tok": 4}
    dims |= {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
    dims |= {"intermediate_size": 96, "vocab_size": 128}
    got = read_family({**dims, "n_group": 4, "topk_group": 2}, "deepseek_v3")
    assert (got["expert_groups"], got["expert_groups_per_token"]) == (4, 2)
    got = read_family({**dims, "n_routed_experts": 256}, "deepseek_v3")
    assert (got["expert_groups"], got["expert_groups_per_token"]) == (8, 4)
    assert "expert_groups" not in read_family({**dims, "n_routed_experts": 12}, "deepseek_v3")
