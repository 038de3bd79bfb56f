"""The attention kernel in the kernel time model (tiersim/workload/attention.py): eager moves
its scores through HBM, flash and sdpa do not; the fused backward recomputes QK^T (2.5x the
forward's products); a causal flash kernel computes only its tiles on or below the diagonal;
sdpa behind a padding mask computes every tile and reads the mask. Expected figures by hand."""

from __future__ import annotations

import itertools

import pytest
from conftest import scenario

from tiersim.state.model import build_model
from tiersim.state.resolved import resolve
from tiersim.workload.attention import flash_computed
from tiersim.workload.kernels import layer_kernels

A100_PEAK, A100_ETA, A100_SMS = 312e12, 0.736, 108  # dgx-a100: bf16 dense peak, fitted, SMs
A100_L2 = 5.4e12  # dgx-a100: measured L2 bandwidth, for the GEMM model's choice of tile
HBM_BW = 2039e9 * 0.90  # dgx-a100: A100 80 GB HBM2e x memory_efficiency
S, B, H, HEADS, D = 1024, 2, 1024, 8, 128  # the small layer below
E, E_F, E_A = S * B * H, S * B * 4 * H, B * HEADS * S * S  # hidden, MLP-wide, scores


def _layer(kernel: str, implementation: str = "megatron", recompute: str = "none", **kw):
    model = {
        "family": "gpt",
        "layers": 2,
        "hidden": H,
        "heads": HEADS,
        "ffn_hidden": 4 * H,
        "vocab": 51200,
        "max_positions": 8192,
        "norm": "layernorm",
        "position": "learned",
        **kw.pop("model", {}),
    }
    training = {
        "implementation": implementation,
        "attention_kernel": kernel,
        "micro_batch_size": kw.pop("b", B),
        "seq_len": kw.pop("seq", S),
        "recompute": recompute,
    }
    raw = {
        "name": f"attention-{kernel}",
        "model": model,
        "training": training,
        "parallel": {"tensor": kw.pop("tensor", 1)},
        "hardware": {"preset": "dgx-a100"},
    }
    s = scenario(raw)
    return layer_kernels(resolve(s), build_model(s.model))


def _eager_attention_gemm_s() -> float:
    """QK^T (1024 x 1024, K 128) and PV (1024 x 128, K 1024), batched over b·heads = 16, as
    the GEMM model times them. QK^T: 4 x 8 tiles of 256 x 128 x 16 = 512 on 108 SMs, 4.74 ->
    5 waves (128 x 128: 1,024, 9.48 -> 10, the same share; the smaller tiles lose more to
    L2 than they gain). PV: 256 x 128 tiles 4 x 1 x 16 = 64, 0.593 of one wave; 64 x 256
    tiles 16 x 1 x 16 = 256, 2.37 -> 3 waves, at L2's 5.4 TB/s of the 312e12 x 320 / 16384 =
    6.094 TB/s they ask: 0.790 x 0.886 = 0.700, the best."""
    flops = 2.0 * S * S * D * B * HEADS  # each product
    qk = flops / (A100_PEAK * A100_ETA * (512 / 108 / 5))
    pv_share = (256 / 108 / 3) * (A100_L2 / (A100_PEAK * 320 / 16384))
    pv = flops / (A100_PEAK * A100_ETA * pv_share)
    return qk + pv


def test_eager_moves_the_scores_and_flash_does_not():
    # eager (Megatron-LM's fused softmax): 22 e + 4 e_f + 13 e_a forward, 38 e + 8 e_f + 19 e_a
    # backward; flash keeps S and P on chip: only the hidden and MLP-wide kernels remain
    eager, flash = _layer("eager"), _layer("flash")
    assert eager.forward.memory_s == pytest.approx((22 * E + 4 * E_F + 13 * E_A) / HBM_BW)
    assert eager.backward.memory_s == pytest.approx((38 * E + 8 * E_F + 19 * E_A) / HBM_BW)
    assert flash.forward.memory_s == pytest.approx((22 * E + 4 * E_F) / HBM_BW)
    assert flash.backward.memory_s == pytest.approx((38 * E + 8 * E_F) / HBM_BW)
    # e_a = 2 x 8 x 1024^2 = 16,777,216 scores: 32 B each, 0.537 GB, 0.29 ms at 1,835 GB/s
    saved = eager.forward.memory_s + eager.backward.memory_s
    saved -= flash.forward.memory_s + flash.backward.memory_s
    assert saved == pytest.approx(32 * 16_777_216 / 1835.1e9)


def test_flash_computes_the_causal_tiles_and_recomputes_qk_in_backward():
    # s = 1024: 8 row blocks of 128 queries; block i needs 2(i + 1) of the 16 blocks of 64
    # keys, 2 + 4 + ... + 16 = 72 of 128: 9/16 of the eager products forward; backward 5
    # products against the forward's 2, 2.5 x 9/16 = 1.40625 against eager's 2
    eager, flash = _layer("eager"), _layer("flash")
    attention = _eager_attention_gemm_s()
    assert eager.forward.gemm_s - flash.forward.gemm_s == pytest.approx((1 - 9 / 16) * attention)
    assert eager.backward.gemm_s - flash.backward.gemm_s == pytest.approx(
        (2 - 2.5 * 9 / 16) * attention
    )


def test_causal_share_of_tiles_by_hand():
    # 512: row blocks of 128 need 2, 4, 6, 8 of the 8 key blocks of 64: 20 / 32
    assert flash_computed(512, 512, None) == 20 / 32
    # 4096: 32 row blocks, (32 + 1) / (2 x 32) = 0.515625
    assert flash_computed(4096, 4096, None) == 33 / 64
    # 1000 (ragged): row blocks 0-6 of 128 rows reach keys 128 (i + 1); the last, 104 rows,
    # reaches key block 15, clipped to 1000 keys: 128 x 128 x (1 + ... + 7) + 104 x 1000
    assert flash_computed(1000, 1000, None) == (128 * 128 * 28 + 104 * 1000) / 1000**2
    # a 256-key window in 1024: block 0 keys 0-127, block 1 0-255, blocks 2-7 a band of 384
    # (first key 128i - 255 lies in the 64-block starting at 128i - 256), over s·w products
    assert flash_computed(1024, 256, 256) == 128 * (128 + 256 + 6 * 384) / (1024 * 256)


def test_sdpa_without_a_padding_mask_is_the_flash_kernel():
    # megatron's sequences are unpadded: SDPA with is_causal=True, its FlashAttention-2 kernel
    assert _layer("sdpa") == _layer("flash")


def test_sdpa_behind_a_padding_mask_computes_every_tile_and_reads_the_mask():
    # huggingface batches are padded: transformers passes a b x 1 x s x s boolean mask, which
    # SDPA converts to bf16 (1 B read, 2 written) and its memory-efficient kernel reads
    # forward (2 B) and backward (2 B): b·s² = e_a / heads elements; all s x s products, the
    # backward 2.5x them
    eager, sdpa = _layer("eager", "huggingface"), _layer("sdpa", "huggingface")
    mask = B * S * S
    assert mask == E_A / HEADS
    assert sdpa.forward.memory_s == pytest.approx((22 * E + 4 * E_F + 5 * mask) / HBM_BW)
    assert sdpa.backward.memory_s == pytest.approx((38 * E + 8 * E_F + 2 * mask) / HBM_BW)
    assert sdpa.forward.gemm_s == pytest.approx(eager.forward.gemm_s)
    attention = _eager_attention_gemm_s()
    assert sdpa.backward.gemm_s - eager.backward.gemm_s == pytest.approx(0.5 * attention)
    assert _layer("flash", "huggingface") == _layer("flash")  # flash_attention_2: no mask


def test_selective_recompute_reruns_the_kernel_as_it_runs():
    eager = _layer("eager", recompute="selective").recompute
    flash = _layer("flash", recompute="selective").recompute
    sdpa = _layer("sdpa", "huggingface", recompute="selective").recompute
    attention = _eager_attention_gemm_s()
    assert eager.memory_s == pytest.approx(13 * E_A / HBM_BW)
    assert eager.gemm_s == pytest.approx(attention)
    assert flash.memory_s == 0.0 and flash.gemm_s == pytest.approx(9 / 16 * attention)
    assert sdpa.memory_s == pytest.approx(5 * B * S * S / HBM_BW)


def test_llama2_7b_at_4096_is_spared_17_gb_of_scores_a_layer():
    # 32 heads of 128, micro-batch 1: e_a = 32 x 4096^2 = 536,870,912 scores x 32 B = 17.18 GB
    llama = {
        "family": "llama",
        "hidden": 4096,
        "heads": 32,
        "ffn_hidden": 11008,
        "vocab": 32000,
        "norm": "rmsnorm",
        "position": "rope",
        "gated_mlp": True,
    }
    eager = _layer("eager", model=llama, seq=4096, b=1)
    flash = _layer("flash", model=llama, seq=4096, b=1)
    moved = eager.forward.memory_s + eager.backward.memory_s
    moved -= flash.forward.memory_s + flash.backward.memory_s
    assert moved * HBM_BW == pytest.approx(17.18e9, rel=1e-3)


SHAPES = list(itertools.product((128, 1000, 4096), (1, 3), (1, 2), (None, 300)))


@pytest.mark.parametrize(("seq", "b", "tensor", "window"), SHAPES)
def test_a_fused_kernel_is_never_slower_than_eager_in_memory_bound_time(seq, b, tensor, window):
    # flash, and sdpa without a window; sdpa with one runs a mask over all s x s scores,
    # which can cost more than eager's s x w scores (5 B per mask element against 13 per
    # score: 4096 x 4096 x 5 > 4 heads x 4096 x 300 x 13)
    shape = {"seq": seq, "b": b, "tensor": tensor, "model": {"sliding_window": window}}
    for implementation in ("megatron", "huggingface"):
        eager = _layer("eager", implementation, "selective", **dict(shape))
        for kernel in ("flash",) if window else ("flash", "sdpa"):
            fused = _layer(kernel, implementation, "selective", **dict(shape))
            for part in ("forward", "backward", "recompute"):
                got, ref = getattr(fused, part).memory_s, getattr(eager, part).memory_s
                assert got <= ref, (kernel, implementation, part)
