"""`training.recompute: selective_op`, torchtitan's op-level selective activation checkpointing
(tiersim/state/op_recompute.py), against a real checkpointed block.

The block is torchtitan 0.3.0's Llama layer built op for op (tests/test_titan_activations.py:
one fused q/k/v projection), run on the CPU through torch.utils.checkpoint (non-reentrant,
early_stop false as torchtitan's SelectiveAC wraps it) with create_selective_checkpoint_
contexts and a policy written as torchtitan 0.3.0's `SelectiveAC._wrap_block` writes it
(torchtitan/distributed/activation_checkpoint.py): save the ops of `_get_default_save_ops`
(the partitioner's compute-intensive ops, the SDPA kernels, aten.max, ...), but every second
aten.mm (or aten.linear) of the block. The CPU runs SDPA as
`_scaled_dot_product_flash_attention_for_cpu`, which stands here for the CUDA flash kernel of
torchtitan's list. Allocations are the profiler's memory events (torch.profiler,
profile_memory), as tiersim/groundtruth/step_timeline.py records them. tests/test_titan_real.py
runs torchtitan's own SelectiveAC on its own model where torchtitan is installed.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from conftest import scenario

torch = pytest.importorskip("torch")

from test_titan_activations import Block, E, H, S, titan  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402
from torch.utils import checkpoint as ckpt  # noqa: E402

from tiersim.frameworks.emit import emit  # noqa: E402
from tiersim.state.activations import accounting_for, layer_bytes  # noqa: E402
from tiersim.state.model import build_model  # noqa: E402
from tiersim.state.op_recompute import op_working_bytes  # noqa: E402
from tiersim.state.resolved import resolve  # noqa: E402
from tiersim.workload.comms import tensor_comms  # noqa: E402
from tiersim.workload.kernels import layer_kernels  # noqa: E402

aten = torch.ops.aten
MM = (aten.mm.default, aten.linear.default)
SAVE_LIST = {  # torchtitan 0.3.0's (those a dense block can run), and the CPU's flash SDPA
    *MM,
    aten.bmm.default,
    aten.addmm.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
    aten._scaled_dot_product_attention_math.default,
    aten.max.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _torchtitan_op_sac():
    meta: dict[str, int] = defaultdict(int)

    def policy(ctx, func, *args, **kwargs):
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func in MM:
            meta[key] += 1
        save = func in SAVE_LIST and not (func in MM and meta[key] % 2 == 0)
        return ckpt.CheckpointPolicy.MUST_SAVE if save else ckpt.CheckpointPolicy.PREFER_RECOMPUTE

    return ckpt.create_selective_checkpoint_contexts(policy)


def recorded(fn) -> tuple[object, int, int]:
    """fn's result, the bytes it leaves allocated and its peak above where it started."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    level = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        level += e.nbytes()
        peak = max(peak, level)
    return result, level, peak


def _run(kv: int, dtype, batch: int, sac: bool) -> tuple[int, int]:
    """(bytes the forward leaves allocated, the peak over forward and backward), both above
    what was allocated before (the weights, the layer input, the rotary table)."""
    torch.manual_seed(0)
    block = Block(kv).to(dtype)
    freqs = 1.0 / 10000.0 ** (torch.arange(0, E, 2).float() / E)
    angles = torch.outer(torch.arange(S).float(), freqs)
    cis = torch.polar(torch.ones_like(angles), angles)
    x = torch.randn(batch, S, H, dtype=dtype, requires_grad=True)
    positions = torch.arange(S).expand(batch, S).contiguous()

    def forward():
        if not sac:
            return block(x, cis, positions)
        return ckpt.checkpoint(
            block, x, cis, positions, use_reentrant=False, context_fn=_torchtitan_op_sac,
            preserve_rng_state=False,
        )  # fmt: skip

    with ckpt.set_checkpoint_early_stop(False):
        out, left, forward_peak = recorded(forward)
        _, _, backward_peak = recorded(lambda: out.sum().backward())
    return left, max(forward_peak, left + backward_peak)


def _predicted(kv: int, dtype: str, batch: int, recompute: str) -> float:
    s = titan(kv, dtype)
    return layer_bytes(
        build_model(s.model), S, batch, accounting_for(s, "cpu"), recompute=recompute
    )


@pytest.mark.parametrize(
    ("kv", "dtype", "batch"),
    [
        (4, "fp32", 1),
        (2, "fp32", 2),
        (1, "fp32", 1),
        (4, "bf16", 2),
        (2, "bf16", 1),
        (1, "bf16", 1),
    ],
)
def test_what_the_policy_keeps_is_measured_to_the_byte(kv, dtype, batch):
    # The forward leaves allocated the checkpoint's cache (the saved ops' outputs) and the
    # block's output, which has the size of its input: so it is the layer's input plus the
    # cache, what tiersim counts a layer keeping under selective_op
    left, _ = _run(kv, DTYPES[dtype], batch, sac=True)
    assert left == _predicted(kv, dtype, batch, "selective_op")


def test_the_kept_bytes_by_hand():
    # h 64, 4 heads of 16 (q = 64), 2 kv heads (kv = 32), f 128, s 32, b 1, fp32: T = 32
    # layer input 4·32·64 = 8,192; mms wqkv (1st) 4·32·(64 + 2·32) = 16,384, w1 (3rd)
    # 4·32·128 = 16,384, w2 (5th) 4·32·64 = 8,192; SDPA output 4·32·64 = 8,192 and its
    # log-sum-exp 4·4·32 = 512: 8,192 + 16,384 + 16,384 + 8,192 + 8,192 + 512
    assert _predicted(2, "fp32", 1, "selective_op") == 57_856
    # wo (2nd) and w3 (4th) are recomputed; under tensor parallelism t = 2 with sequence
    # parallelism a rank keeps 1/2 of the input, of wqkv's, w1's and SDPA's outputs, the
    # whole T x h partial sum w2 computes (8,192) and 1/2 of the two reduce-scatters'
    # outputs (8,192): (8,192 + 16,384 + 16,384 + 8,192 + 512) / 2 + 8,192 + 8,192
    # = 24,832 + 16,384 = 41,216
    s = titan(2, "fp32")
    m, acc = build_model(s.model), accounting_for(s, "cpu")
    assert layer_bytes(m, S, 1, acc, 2, True, "selective_op") == 41_216


@pytest.mark.parametrize(("kv", "dtype"), [(4, "fp32"), (2, "bf16"), (1, "bf16")])
def test_the_backward_holds_what_it_holds_without_checkpointing(kv, dtype):
    # torchtitan's early_stop false: the rerun forward goes to the block's end, each cache
    # entry freed once used, so the backward's peak is the one without checkpointing,
    # measured; tiersim's layer then holds its input, what it kept (the cache) and the working
    # set: together the input and the whole `recompute: none` set
    _, with_policy = _run(kv, DTYPES[dtype], 1, sac=True)
    _, without = _run(kv, DTYPES[dtype], 1, sac=False)
    assert with_policy == without
    s = titan(kv, dtype)
    m, acc = build_model(s.model), accounting_for(s, "cpu")
    layer_input = acc.compute_bytes * S * H
    held = _predicted(kv, dtype, 1, "selective_op") + op_working_bytes(m, S, 1, acc)
    assert held == layer_input + _predicted(kv, dtype, 1, "none")


# --- recompute time ----------------------------------------------------------------------------

A100_PEAK, A100_ETA = 312e12, 0.736  # dgx-a100: bf16 dense peak, efficiency
HBM_BW = 2039e9 * 0.90  # dgx-a100: A100 80 GB HBM2e x memory_efficiency


def layer_kernels_of(recompute: str, tensor: int = 1, **more):
    model = {
        "hidden": 1024,
        "heads": 8,
        "kv_heads": 2,
        "head_dim": 128,
        "layers": 2,
        "vocab": 1024,
        "ffn_hidden": 3072,
        "norm": "rmsnorm",
        "position": "rope",
        "gated_mlp": True,
        "max_positions": 2048,
    }
    training = {"implementation": "torchtitan", "seq_len": 2048, "recompute": recompute, **more}
    # one SM and no L2 figure: every GEMM is one full wave of the largest tile (gemm.py), so
    # its time is its FLOPs at peak x efficiency
    hardware = {"preset": "dgx-a100", "gpu": {"sm_count": 1, "l2_bandwidth": None}}
    parallel = {"tensor": tensor, "sequence": tensor > 1}
    raw = {"name": "op", "model": model, "training": training, "hardware": hardware}
    s = scenario({**raw, "parallel": parallel})
    return layer_kernels(resolve(s), build_model(s.model))


def test_recompute_reruns_every_second_mm_and_the_memory_bound_forward():
    # T = 2048 tokens, h 1024, q = 8 x 128 = 1024, f 3072. Rerun: wo 2·T·q·h
    # = 2 x 2048 x 1024 x 1024 = 4,294,967,296; w3 2·T·h·f = 12,884,901,888:
    # 17,179,869,184 FLOPs at 312e12 x 0.736
    k = layer_kernels_of("selective_op")
    assert k.recompute.gemm_s == pytest.approx(17_179_869_184 / (A100_PEAK * A100_ETA))
    # every memory-bound kernel of the forward again (its attention core moves no scores:
    # SDPA's flash kernel, saved): 22 B per hidden element and 6 per MLP-wide one,
    # e = 2048 x 1024 = 2,097,152, e_f = 2048 x 3072 = 6,291,456
    assert k.recompute.memory_s == pytest.approx((22 * 2_097_152 + 6 * 6_291_456) / HBM_BW)
    assert k.recompute.memory_s == pytest.approx(k.forward.memory_s)


def test_recompute_under_tensor_parallelism_splits_each_rerun_mm():
    # t = 2: wo T x 1024 (K 512), w3 T x 1536 (K 1024): half the FLOPs
    k = layer_kernels_of("selective_op", tensor=2)
    assert k.recompute.gemm_s == pytest.approx(17_179_869_184 / 2 / (A100_PEAK * A100_ETA))


def test_refused_outside_torchtitans_code(cli, write):
    doc = {
        "name": "m",
        "model": {"preset": "gpt2"},
        "training": {"recompute": "selective_op"},
    }
    code, out, err = cli("validate", write(doc))
    assert code == 2 and out == "" and "Traceback" not in err
    assert "training.recompute: selective_op is torchtitan's op-level policy" in err
    assert "expected training.implementation: torchtitan" in err


def _tensor_comms(recompute: str, sequence: bool):
    model = {"preset": "llama-3-8b"}
    training = {"implementation": "torchtitan", "seq_len": 2048, "recompute": recompute}
    parallel = {"tensor": 2, "sequence": sequence}
    s = scenario({"name": "c", "model": model, "training": training, "parallel": parallel})
    return tensor_comms(resolve(s), 4096)


def test_the_collectives_the_policy_reruns():
    # without sequence parallelism torchtitan's row-parallel outputs are all-reduced, an op
    # the policy does not save: the backward's 2 all-reduces and the rerun forward's 2
    _, none, _ = _tensor_comms("none", False)
    _, op, _ = _tensor_comms("selective_op", False)
    assert op.nbytes == pytest.approx(2 * none.nbytes)
    # with it the reduce-scatters' outputs are saved and the all-gathers rerun, which the
    # sequence-parallel backward gathers again anyway: nothing more
    assert _tensor_comms("selective_op", True) == _tensor_comms("none", True)


def test_megatron_is_told_it_has_no_such_policy():
    s = titan(2, "bf16", recompute="selective_op")
    notes = {n.path: n.message for n in emit(s, "megatron").notes}
    assert notes["training.recompute"].startswith("selective_op: torchtitan's op-level policy")
    assert "--recompute-granularity" not in emit(s, "megatron").text


def test_inventory_lists_what_the_policy_keeps(cli, write):
    doc = {
        "name": "inv",
        "model": {"preset": "llama-3-8b"},
        "training": {"implementation": "torchtitan", "seq_len": 8192, "recompute": "selective_op"},
        "parallel": {"tensor": 2, "sequence": True},
    }
    code, out, err = cli("inventory", write(doc))
    assert code == 0, err
    assert "w1 output" in out and "layer input (checkpoint argument)" in out
    assert "divided by tensor 2 but w2's output, kept whole on every rank" in out
