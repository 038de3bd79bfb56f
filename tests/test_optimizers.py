"""Optimizers as objects in one registry: their state bytes (hand arithmetic from each
implementation's source), the Newton-Schulz FLOPs of Muon, their step's temporaries, and the
PyTorch optimizers `measure` builds for them."""

from __future__ import annotations

import sys

import pytest
from conftest import inventory

from tiersim.state.layers import Matrix
from tiersim.state.optimizers import NAMES, REGISTRY, newton_schulz_flops, optimizer


def test_every_name_is_one_object_and_unknown_names_are_refused():
    assert set(NAMES) >= {"adam", "adamw", "adamw8bit", "muon"}
    assert all(REGISTRY[n].name == n for n in NAMES)
    with pytest.raises(ValueError, match="no optimizer 'adamx'"):
        optimizer("adamx")


def test_adamw8bit_keeps_uint8_moments_and_fp32_absmax_per_256_block():
    """bitsandbytes Optimizer2State.init_state: state1, state2 uint8 (1 B each) and absmax1,
    absmax2 fp32 of ceil(n/256) blocks; under min_8bit_size = 4096 values, fp32 state."""
    eight = optimizer("adamw8bit")
    # 4096 x 4096: 2 x 16,777,216 + 2 x 4 x 65,536 = 33,554,432 + 524,288
    assert eight.state_bytes([Matrix(4096, 4096)], 4) == 34_078_720
    # 1000 x 1000 = 1,000,000 values: ceil(1e6 / 256) = 3,907 blocks (the last partial)
    assert eight.state_bytes([Matrix(1000, 1000)], 4) == 2 * 1_000_000 + 8 * 3_907
    # a 64-value vector stays 32-bit: 2 x 64 x 4 = 512 B, whatever the precision key says
    assert eight.state_bytes([Matrix(64, 1)], 2) == 512
    # count: two alike tensors, twice
    assert eight.state_bytes([Matrix(4096, 4096, 2)], 4) == 2 * 34_078_720


def test_muon_keeps_one_momentum_on_layer_matrices_and_adamw_moments_elsewhere():
    muon = optimizer("muon")
    layer, norm = Matrix(64, 128), Matrix(64, 1)
    embed = Matrix(1000, 64, split_rows=True, embedding=True)
    # fp32: 64 x 128 x 4 (momentum); 64 x 2 x 4 (AdamW); 1000 x 64 x 2 x 4 (AdamW)
    assert muon.state_bytes([layer, norm, embed], 4) == 32_768 + 512 + 512_000


def test_newton_schulz_flops_per_iteration():
    """Five quintic iterations on m x n (m = min): X Xᵀ 2m²n, A·A 2m³, B·X 2m²n."""
    m, n = 4096, 11008
    assert newton_schulz_flops(11008, 4096) == 5 * (2 * m * m * n + 2 * m**3 + 2 * m * m * n)
    muon = optimizer("muon")
    # the update of a 4096 x 11008 matrix: Newton-Schulz plus 4 elementwise FLOPs a value
    assert muon.update_flops([Matrix(4096, 11008)]) == newton_schulz_flops(4096, 11008) + 4 * m * n


def test_scenario_with_adamw8bit_counts_its_state_in_the_inventory():
    model = {
        "hidden": 64,
        "layers": 1,
        "heads": 4,
        "ffn_hidden": 4096,
        "vocab": 128,
        "norm": "rmsnorm",
        "position": "rope",
        "gated_mlp": False,
        "tied_embeddings": False,
        "qkv_bias": False,
        "attn_out_bias": False,
        "mlp_bias": False,
    }
    inv = inventory(
        {
            "name": "eight",
            "model": model,
            "training": {"optimizer": "adamw8bit", "workspace": "0 B"},
        }
    )
    # tensor by tensor (8-bit: 2n + 8·ceil(n/256); under 4096 values: 8n):
    # embedding and head 128 x 64 = 8,192: 16,384 + 256 = 16,640 each
    # q, k, v, o 64 x 64 = 4,096 (not under 4096): 8,192 + 128 = 8,320 each
    # MLP up and down 64 x 4096 = 262,144: 524,288 + 8,192 = 532,480 each
    # three RMSNorm weights of 64: 512 each
    expected = 2 * 16_640 + 4 * 8_320 + 2 * 532_480 + 3 * 512
    assert inv.per_gpu["optimizer"] == expected == 1_133_056


def test_torch_optimizers_measure_builds():
    torch = pytest.importorskip("torch")
    net = torch.nn.ModuleDict(
        {"embed": torch.nn.Embedding(10, 4), "proj": torch.nn.Linear(4, 4, bias=True)}
    )
    named = list(net.named_parameters())
    muon, adamw = optimizer("muon").build(torch, named)
    assert isinstance(muon, torch.optim.Muon) and isinstance(adamw, torch.optim.AdamW)
    assert [p.shape for g in muon.param_groups for p in g["params"]] == [(4, 4)]
    # the embedding and the bias go to AdamW
    assert len([p for g in adamw.param_groups for p in g["params"]]) == 2
    (sgd,) = optimizer("sgd_momentum").build(torch, named)
    assert sgd.param_groups[0]["momentum"] == 0.9
    with pytest.raises(ValueError, match="PyTorch has no lion"):
        optimizer("lion").build(torch, named)


def test_adamw8bit_is_built_from_bitsandbytes_and_its_absence_is_said(monkeypatch):
    torch = pytest.importorskip("torch")
    named = list(torch.nn.Linear(4, 4).named_parameters())
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # as if not installed
    with pytest.raises(ValueError, match="pip install 'tiersim\\[measure\\]'"):
        optimizer("adamw8bit").build(torch, named)


def test_adamw8bit_and_muon_step_temporaries_by_hand():
    """What the step allocates beside the state. bitsandbytes' CPU backend, one tensor at a
    time in fp32: both moments dequantized, the gradient upcast, a 16-bit parameter's fp32
    copy, sqrt(v) and sqrt(v)/c: (4 + 4 + 4 + 4 + 4 + 4) B x 65,536 values in bf16 (the fp32
    copy is the parameter itself in fp32: 20 B); CUDA's kernel works in place. Muon: the
    largest layer matrix's Newton-Schulz set on the CPU, the update (value bytes), X, the new X
    and oneDNN's packed X (3 x 2 B) a value and the Gram matrix and A + A·A (2 x 2m²), or the
    AdamW rest's single-tensor path, 2 tensors of the largest embedding, whichever is larger."""
    eight = optimizer("adamw8bit")
    assert eight.step_temporary_bytes(10**6, 65_536, 2, "cpu") == 24 * 65_536
    assert eight.step_temporary_bytes(10**6, 65_536, 4, "cpu") == 20 * 65_536
    assert eight.step_temporary_bytes(10**6, 65_536, 2, "cuda") == 0
    muon = optimizer("muon")
    layer, embed = Matrix(64, 128), Matrix(512, 64, split_rows=True, embedding=True)
    # layer: (2 + 6) x 8,192 + 4 x 64² = 81,920; embedding's AdamW: 2 x 32,768 x 2 = 131,072
    assert muon.step_temporary_bytes(0, 32_768, 2, "cpu", tensors=[layer, embed]) == 131_072
    # a wider layer, 256 x 512 = 131,072 values: (2 + 6) x 131,072 + 4 x 256² = 1,310,720
    wide = Matrix(256, 512)
    assert muon.step_temporary_bytes(0, 131_072, 2, "cpu", tensors=[wide, embed]) == 1_310_720


def test_muon_update_is_timed_by_its_newton_schulz_flops():
    """Llama-2-7B, ZeRO-1 over 8 H100s: one layer's update (its shard, 1/8) at the GPU's bf16
    GEMM rate: q, k, v, o 4096 x 4096 are 5 x (4 + 2) x 4096³ each, gate, up, down 4096 x
    11008 are 5 x (4 x 4096² x 11008 + 2 x 4096³); bound by these FLOPs, not by its bytes
    (its elementwise 4 FLOPs a value ride with the bytes)."""
    from conftest import scenario

    from tiersim.state.resolved import resolve
    from tiersim.workload.work import build_workload

    raw = {
        "name": "muon",
        "model": {"preset": "llama-2-7b"},
        "training": {"optimizer": "muon", "seq_len": 1024},
        "hardware": {"preset": "dgx-h100"},
        "parallel": {"data": 8, "zero_stage": 1},
    }
    r = resolve(scenario(raw))
    layer = next(u for u in build_workload(r).units if u.name.startswith("L"))
    attention = 4 * 5 * 6 * 4096**3
    mlp = 3 * 5 * (4 * 4096**2 * 11008 + 2 * 4096**3)
    rate = r.machine.gpu.peak_flops["bf16"] * r.machine.gpu.efficiency
    assert layer.optimizer_gpu_s == pytest.approx((attention + mlp) / 8 / rate)


@pytest.mark.parametrize("name", ["adafactor", "muon"])
def test_optimizers_that_need_matrix_shapes_refuse_a_generic_model(name):
    from conftest import scenario

    from tiersim.core.errors import InputError

    raw = {
        "name": "g",
        "model": {"parameters": 10**9, "layers": 4},
        "training": {"optimizer": name},
    }
    with pytest.raises(InputError, match=f"{name} .* a generic model"):
        scenario(raw)


def test_transformers_fuses_a_layers_experts_into_one_gate_up_tensor():
    """transformers 5 (huggingface) holds a layer's experts as gate_up_proj [E, 2f, h] and
    down_proj [E, h, f]: the CPU AdamW step's largest tensor is E x 2f x h = 4 x 192 x 64 =
    49,152 values, not one expert's 96 x 64; megatron's grouped experts are not fused so."""
    from conftest import scenario

    from tiersim.state.inventory import rank_matrices
    from tiersim.state.resolved import resolve
    from tiersim.state.step_optimizer import fused_experts

    model = {"hidden": 64, "heads": 4, "layers": 2, "vocab": 256, "ffn_hidden": 128}
    model |= {"norm": "rmsnorm", "position": "rope", "gated_mlp": True}
    model |= {"experts": 4, "experts_per_token": 2, "expert_ffn_hidden": 96}
    for implementation, values in (("huggingface", 49_152), ("megatron", 0)):
        training = {"implementation": implementation, "workspace": "0 B", "seq_len": 64}
        r = resolve(scenario({"name": "e", "model": model, "training": training}))
        mats = [m for unit in rank_matrices(r, 0) for m in unit]
        assert fused_experts(r, mats) == values
