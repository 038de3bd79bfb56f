"""torchtitan's chunked loss (ChunkedLossWrapper, torchtitan/components/loss.py: num_chunks 8
by default, as its config registry trains llama3_8b): the head and the cross-entropy run,
forward and backward, on 1/N of the tokens at a time inside the forward pass; only the head
input's accumulated gradient is kept for backward (state/chunked_loss.py)."""

from __future__ import annotations

import pytest
from conftest import scenario

from tiersim.core.errors import InputError
from tiersim.state.activations import accounting_for, outside_items
from tiersim.state.inventory import build_inventory
from tiersim.state.model import build_model
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events

T, H, V = 128, 64, 512  # tokens (seq 128, micro-batch 1), hidden, vocabulary
BF16 = {"weights": "bf16", "gradients": "bf16", "master": "none", "optimizer": "bf16"}
MODEL = {
    "layers": 2, "hidden": H, "heads": 4, "ffn_hidden": 128, "vocab": V, "max_positions": 256,
    "norm": "rmsnorm", "position": "rope", "gated_mlp": True, "tied_embeddings": False,
}  # fmt: skip


def titan(**training) -> dict:
    base = {"implementation": "torchtitan", "seq_len": T, "precision": BF16, "workspace": "0 B"}
    return {"name": "chunks", "model": MODEL, "training": {**base, **training}}


def loss_events(raw: dict) -> list:
    r = resolve(scenario(raw))
    return [e for e in build_events(r, build_inventory(r), 0) if e.moment.endswith(": loss")]


def running_peak(events) -> int:
    held = peak = 0
    for e in events:
        held += e.nbytes if e.alloc else -e.nbytes
        peak = max(peak, held)
    return peak


def test_torchtitan_chunks_its_loss_in_8_by_default():
    assert accounting_for(scenario(titan())).loss_chunks == 8
    assert accounting_for(scenario({**titan(), "training": {"seq_len": T}})).loss_chunks == 1


def test_only_the_accumulated_gradient_is_kept_for_backward():
    """Outside the layers on the last stage: the final norm (fp32 input and normalised,
    4·128·64 = 32,768 each, fp32 1/rms 4·128 = 512) and the head input's accumulated gradient
    in bf16, 2·128·64 = 16,384 B, in place of the head's input (16,384) and the fp32
    log-softmax over the vocabulary (4·128·512 = 262,144), the labels (int64, 8·128 = 1,024),
    its total weight (4) and the int64 count of valid tokens the summed loss is divided by
    (8)."""
    s = scenario(titan())
    m, acc = build_model(s.model), accounting_for(s)
    items = {i.name: i.nbytes for i in outside_items(m, T, 1, acc, first=False, last=True)}
    assert sum(items.values()) == 32_768 + 512 + 32_768 + 16_384
    assert not [name for name in items if "log-softmax" in name]
    one_piece = scenario(titan(loss_chunks=1))
    m, acc = build_model(one_piece.model), accounting_for(one_piece)
    whole = outside_items(m, T, 1, acc, first=False, last=True)
    assert sum(i.nbytes for i in whole) == 32_768 + 512 + 32_768 + 16_384 + 262_144 + 1_024 + 4 + 8


def test_the_loss_peak_is_one_chunk_of_the_vocabulary():
    """The loss's own allocations in order, bf16, 8 chunks of 16 tokens: c = 16 x 512 = 8,192
    logits values a chunk. Held at once, at most: the hidden states 2·128·64 = 16,384, the
    fp32 gradient buffer 4·128·64 = 32,768, the chunk's bf16 logits 2·8,192 = 16,384, its
    fp32 log-softmax 4·8,192 = 32,768, nll_loss_backward's and log_softmax_backward's fp32
    gradients 32,768 each: 163,840 B. Unchunked: the fp32 log-softmax and its two fp32
    gradients over all 128 tokens, 3 x 4·128·512 = 786,432 B at least."""
    events = loss_events(titan())
    assert running_peak(events) == 16_384 + 32_768 + 16_384 + 32_768 + 2 * 32_768 == 163_840
    # what stays after the loss's forward: the accumulated gradient, freed in its backward
    kept = [e for e in events if e.key == "loss kept"]
    assert [(e.moment, e.alloc, e.nbytes) for e in kept] == [
        ("forward: loss", True, 16_384),
        ("backward: loss", False, 16_384),
    ]
    # the head's weight gradient (512 x 64 in bf16 = 65,536) is made in each chunk and added
    # into .grad at once: it peaks with the chunk's bf16 loss gradient, after the fp32 ones
    head = [e.nbytes for e in events if e.key == "d head" and e.alloc]
    assert head == [65_536]
    assert running_peak(loss_events(titan(loss_chunks=1))) >= 3 * 262_144


def test_fp32_keeps_the_buffer_itself():
    """In fp32 the buffer's cast to the hidden states' dtype is the buffer: 4·128·64 = 32,768
    B kept, never two of them."""
    fp32 = {k: "fp32" for k in ("weights", "gradients", "optimizer")} | {"master": "none"}
    events = loss_events(titan(precision=fp32))
    buffer = [e for e in events if e.key in ("grad buffer", "loss kept")]
    assert [(e.key, e.alloc) for e in buffer] == [
        ("grad buffer", True),
        ("grad buffer", False),
        ("loss kept", True),
        ("loss kept", False),
    ]


def test_loss_chunks_under_another_implementation_or_not_dividing_the_tokens_is_refused():
    with pytest.raises(InputError, match=r"training.loss_chunks: is 8, but training.impl"):
        scenario({**titan(), "training": {"seq_len": T, "loss_chunks": 8}})
    with pytest.raises(InputError, match=r"does not divide a micro-batch's 128 tokens"):
        scenario(titan(loss_chunks=3))
    with pytest.raises(InputError, match=r"torchtitan's default 8, which does not divide"):
        scenario(titan(seq_len=100))


def test_a_torchtitan_toml_imports_its_loss(tmp_path):
    """A TOML of torchtitan's job-config era computes the loss in one piece (no [loss]):
    loss_chunks 1; a [loss] num_chunks (ChunkedLossWrapper.Config's) is read as given."""
    from tiersim.frameworks.assemble import ImportOptions, import_configs

    toml = tmp_path / "t.toml"
    toml.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nseq_len = 8192\n')
    back = import_configs([toml], ImportOptions(kind="torchtitan", name="t"))
    assert back.loaded.scenario.training.loss_chunks == 1
    toml.write_text(toml.read_text() + "[loss]\nnum_chunks = 16\n")
    back = import_configs([toml], ImportOptions(kind="torchtitan", name="t"))
    assert back.loaded.scenario.training.loss_chunks == 16
