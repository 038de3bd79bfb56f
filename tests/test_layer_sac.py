"""`training.recompute: full` with `training.recompute_every: N`, torchtitan's layer-level
selective checkpointing (`selective_ac_option = N`; tiersim/state/layer_sac.py): every N-th block
checkpointed whole, the others keeping all they save.

Measured: a stack of torchtitan 0.3.0's Llama blocks (tests/test_titan_activations.py) on the CPU,
block c (from 1) wrapped in a non-reentrant torch.utils.checkpoint where c % N == 0, as
torchtitan's `_apply_layer_sac` wraps it (pytorch/torchtitan cfb9326515, torchtitan/
distributed/activation_checkpoint.py); the forward's allocations from the profiler's memory
events. bf16, so that every kept tensor is the forward's own allocation (RMSNorm keeps an fp32
copy of its input, not the input)."""

from __future__ import annotations

import pytest
from conftest import scenario

torch = pytest.importorskip("torch")

from test_op_recompute import layer_kernels_of, recorded  # noqa: E402
from test_titan_activations import Block, E, H, S, titan  # noqa: E402
from torch.utils import checkpoint as ckpt  # noqa: E402

from tiersim.frameworks.emit import emit  # noqa: E402
from tiersim.state.activations import accounting_for, layer_bytes  # noqa: E402
from tiersim.state.model import build_model  # noqa: E402


def _stack_left(layers: int, every: int) -> int:
    """Bytes the forward of `layers` blocks leaves allocated, block c checkpointed where
    c % every == 0."""
    torch.manual_seed(0)
    blocks = [Block(2).to(torch.bfloat16) for _ in range(layers)]
    freqs = 1.0 / 10000.0 ** (torch.arange(0, E, 2).float() / E)
    angles = torch.outer(torch.arange(S).float(), freqs)
    cis = torch.polar(torch.ones_like(angles), angles)
    x = torch.randn(1, S, H, dtype=torch.bfloat16, requires_grad=True)
    pos = torch.arange(S).view(1, S)

    def forward():
        y = x
        for c, block in enumerate(blocks, start=1):
            if c % every == 0:
                y = ckpt.checkpoint(
                    block, y, cis, pos, use_reentrant=False, preserve_rng_state=False
                )
            else:
                y = block(y, cis, pos)
        return y

    _, left, _ = recorded(forward)
    return left


@pytest.mark.parametrize(("layers", "every"), [(4, 2), (4, 4), (3, 1)])
def test_what_the_layers_keep_is_measured_to_the_byte(layers, every):
    # The forward leaves allocated each block's kept tensors and the stack's output
    # (2·T·h = 2 x 32 x 64 = 4,096 B): a checkpointed block keeps its input, the block
    # before's output, but the first block's, allocated before (checkpointed with every 1)
    left = _stack_left(layers, every)
    first = 2 * S * H if every == 1 else 0
    s = titan(2, "bf16", recompute="full", recompute_every=every)
    m, acc = build_model(s.model), accounting_for(s, "cpu")
    assert left - 2 * S * H + first == layers * layer_bytes(m, S, 1, acc, recompute="full")


def test_the_mean_layer_by_hand():
    # bf16, h 64, 4 heads of 16, 2 kv heads, f 128, T = 32: with no recompute a layer keeps
    # two norms x (4·32·64 + 4·32 + 4·32·64 = 16,512) = 33,024, wqkv input 2·32·64 = 4,096,
    # the rotary table's rows at the positions (complex64, 8 of 16 / 2 a token) 8·32·8 =
    # 2,048, q 4,096, k and v at the 2 kv heads 2 x 2·32·32 = 4,096, output 4,096,
    # log-sum-exp 4·4·32 = 512, w1/w3 input 4,096 and 4 x 2·32·128 = 32,768: 88,832; full
    # recompute its input, 4,096. Every 2nd layer: (4,096 + 88,832) / 2 = 46,464
    s = titan(2, "bf16", recompute="full", recompute_every=2)
    m, acc = build_model(s.model), accounting_for(s, "cpu")
    assert layer_bytes(m, S, 1, acc, recompute="none") == 88_832
    assert layer_bytes(m, S, 1, acc, recompute="full") == 46_464


def test_one_layer_in_n_reruns_its_forward():
    every_third = layer_kernels_of("full", recompute_every=3)
    assert every_third.recompute.gemm_s == pytest.approx(every_third.forward.gemm_s / 3)
    assert every_third.recompute.memory_s == pytest.approx(every_third.forward.memory_s / 3)


def test_torchtitan_round_trip(tmp_path):
    s = titan(2, "bf16", recompute="full", recompute_every=2)
    toml = emit(s, "torchtitan").text
    assert 'selective_ac_option = "2"' in toml and 'mode = "selective"' in toml
    notes = {n.path: n.message for n in emit(s, "megatron").notes}
    assert "Megatron-LM has no every-n-th rule" in notes["training.recompute_every"]


def test_refused_without_full_recompute(cli, write):
    doc = {"name": "e", "model": {"preset": "gpt2"}, "training": {"recompute_every": 2}}
    code, out, err = cli("validate", write(doc))
    assert code == 2 and out == "" and "Traceback" not in err
    assert "training.recompute_every: is set, but training.recompute is none" in err
    assert "(expected recompute: full)" in err
    assert scenario(doc | {"training": {"recompute": "full", "recompute_every": 2}})
