"""Megatron-Core's cross-entropy (`training.loss_fusion`) and FP8 parameters
(`training.fp8.param_gather`): what each keeps in the step's memory timeline and the
inventory, the import of Megatron-LM's flags and the emitter's round trip; worked by hand.

Sources: megatron/core/tensor_parallel/cross_entropy.py (calculate_logits_max: `.float()`, the
fp32 copy made the softmax in place and saved) and megatron/core/fusions/fused_cross_entropy.py
(the native fusion: the same fp32 softmax, the gradient cast back to the logits' dtype);
transformer_engine/pytorch/cross_entropy.py (CrossEntropyFunction: the gradient written into
the input logits in forward, `ctx.save_for_backward(_input, ...)`, backward in place);
Megatron-LM's --fp8-param-gather ("keep the compute param in fp8 (do not use any other
intermediate dtype)", distributed_data_parallel_config.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import scenario
from test_memory_timeline import TINY  # a tiny Llama-style model: the loss's tensors dominate

import tiersim
from tiersim.frameworks.assemble import ImportOptions, import_configs
from tiersim.frameworks.emit import EXTENSIONS, emit
from tiersim.state.inventory import build_inventory
from tiersim.state.resolved import resolve
from tiersim.state.step_memory import build_events, gpu_timeline

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "frameworks"
BF16 = {"weights": "bf16", "gradients": "bf16", "master": "none", "optimizer": "bf16"}
FP8_COPIES = "FP8 weight copies (training.fp8)"


def tiny(parallel=None, **training) -> dict:
    base = {"seq_len": 128, "precision": BF16, "workspace": "0 B"}
    raw = {"name": "tiny", "model": TINY, "training": {**base, **training}}
    # the default GPU without its kernel table: every FP8 recipe taken (memory needs no rate)
    raw["hardware"] = {"gpu": {"kernels": None}}
    return {**raw, "parallel": parallel} if parallel else raw


def timeline(raw: dict):
    r = resolve(scenario(raw))
    inv = build_inventory(r)
    return r, inv, gpu_timeline(r, inv)


def loss_events(raw: dict) -> list[tuple[str, int, bool]]:
    r, inv, _ = timeline(raw)
    return [(e.part, e.nbytes, e.alloc) for e in build_events(r, inv, 0) if "loss" in e.moment]


# --- training.loss_fusion ----------------------------------------------------------------------

VALUES = 128 * 32000 // 2  # logits on one GPU: s·V/t, s = 128, V = 32,000, t = 2


def test_te_cross_entropy_keeps_the_bf16_logits_and_no_fp32_copy():
    """TE's parallel_cross_entropy: the bf16 logits (s·V/t·2 = 4,096,000 B) are written with
    their gradient in forward and kept; backward is in place: nothing else vocabulary-sized."""
    parts = loss_events(tiny({"tensor": 2}, loss_fusion="te"))
    assert parts == [("logits", 2 * VALUES, True), ("logits", 2 * VALUES, False)]


def test_native_fusion_keeps_the_fp32_softmax_as_the_unfused_loss_does():
    """fused_vocab_parallel_cross_entropy upcasts inside (calculate_logits_max's .float()) and
    keeps the fp32 softmax (s·V/t·4 = 8,192,000 B); its gradient is cast back to bf16."""
    native = loss_events(tiny({"tensor": 2}, loss_fusion="native"))
    assert native == loss_events(tiny({"tensor": 2}))
    assert ("logits in fp32 (kept by the loss)", 4 * VALUES, True) in native
    assert ("loss gradient (compute precision)", 2 * VALUES, True) in native


def test_te_loss_lowers_the_loss_peak_by_the_fp32_copy():
    """At the forward of the loss the unfused loss holds the bf16 logits and the fp32 copy
    (2 + 4 B a value) where te holds the logits alone (2 B): 4 x 4,096,000 = 16,384,000 B
    less, the whole-step peak being at the loss for this vocabulary."""
    _, _, fused = timeline(tiny({"tensor": 2}, loss_fusion="te"))
    _, _, plain = timeline(tiny({"tensor": 2}))
    assert plain.peak_event.moment == "forward: loss"
    assert plain.peak_allocated_bytes - fused.peak_allocated_bytes == 4 * VALUES


def _saved_bytes(loss_fn, *args) -> tuple[torch.Tensor, int]:
    """The loss and the bytes it keeps for backward: floating-point saved tensors by storage,
    through autograd's saved-tensor hooks (the labels left out)."""
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor):
        if t.is_floating_point():
            kept[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = loss_fn(*args)
    return loss, sum(kept.values())


class _MegatronCE(torch.autograd.Function):
    """cross_entropy.py's _VocabParallelCrossEntropy on one rank, op for op: the fp32 copy,
    max subtracted, exp and the division in place, the softmax saved; backward in place, the
    gradient cast back to the logits' dtype (as the native fusion does explicitly)."""

    @staticmethod
    def forward(ctx, logits, y):
        x = logits.float()
        x -= x.max(dim=-1, keepdim=True).values
        predicted = x.gather(-1, y[:, None])[:, 0].clone()
        torch.exp(x, out=x)
        total = x.sum(dim=-1)
        x.div_(total[:, None])
        ctx.save_for_backward(x, y)
        ctx.dtype = logits.dtype
        return (torch.log(total) - predicted).mean()

    @staticmethod
    def backward(ctx, grad_output):
        x, y = ctx.saved_tensors
        x[torch.arange(len(y)), y] -= 1
        return x.mul_(grad_output / len(y)).to(ctx.dtype), None


class _TeCE(torch.autograd.Function):
    """TE's CrossEntropyFunction's contract in PyTorch ops (its Triton kernels need a GPU):
    row statistics in fp32, the gradient written into the logits' own storage in forward and
    those saved; backward scales them in place and returns them."""

    @staticmethod
    def forward(ctx, logits, y):
        rows = logits.float()  # a kernel's registers, row by row: freed here
        lse = torch.logsumexp(rows, dim=-1)
        loss = (lse - rows.gather(-1, y[:, None])[:, 0]).mean()
        grad = torch.exp(rows - lse[:, None])
        grad[torch.arange(len(y)), y] -= 1
        logits.copy_(grad / len(y))
        ctx.save_for_backward(logits, y)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        logits, _ = ctx.saved_tensors
        return logits.mul_(grad_output), None


def test_real_pytorch_saved_bytes_of_the_two_loss_contracts():
    """Measured on the CPU, 64 tokens x 1,000 classes, bf16 logits from a matmul: Megatron's
    loss keeps the fp32 softmax, 64 x 1,000 x 4 = 256,000 B; TE's keeps the bf16 logits,
    64 x 1,000 x 2 = 128,000 B; both give F.cross_entropy's gradient."""
    torch.manual_seed(0)
    y = torch.randint(0, 1000, (64,))
    w = torch.randn(32, 1000)
    grads = {}
    saved = {}
    for name, fn in (("megatron", _MegatronCE.apply), ("te", _TeCE.apply), ("ref", None)):
        h = torch.randn(64, 32, generator=torch.Generator().manual_seed(1), requires_grad=True)
        logits = h.bfloat16() @ w.bfloat16()
        if fn is None:
            torch.nn.functional.cross_entropy(logits.float(), y).backward()
        else:
            loss, saved[name] = _saved_bytes(fn, logits, y)
            loss.backward()
        grads[name] = h.grad
    assert saved == {"megatron": 64 * 1000 * 4, "te": 64 * 1000 * 2}
    for name in ("megatron", "te"):  # bf16 rounding of the gradients only
        assert torch.allclose(grads[name], grads["ref"], atol=2e-3, rtol=2e-2)


# --- training.fp8.param_gather -----------------------------------------------------------------

# TINY's weights: embeddings and head 32,000 x 64 each, 4 rms norms of 64 in the layers and
# the final one: 2 x 2,048,000 + 5 x 64 = 4,096,320 values that stay bf16 (2 B); a layer's
# linears q, k, v, o 64 x 64 (4,096) and gate, up, down 64 x 128 (8,192): 40,960 values
REST = 4_096_320
LINEAR = 2 * 40_960
# tensorwise: each linear weight twice (row-wise and transposed) at 1 B with one fp32 scale
# a copy: 4 x 2 x (4,096 + 4) + 3 x 2 x (8,192 + 4) = 81,976 B a layer
FP8_LAYER = 4 * 2 * 4_100 + 3 * 2 * 8_196


def test_fp8_params_are_the_weights_no_bf16_copy_beside_them():
    fp8 = {"recipe": "tensorwise", "param_gather": True}
    r, inv, t = timeline(tiny(fp8=fp8))
    # resident weights: the rest in bf16 and the FP8 linears: 8,192,640 + 163,952 B
    assert inv.per_gpu["weights"] == 2 * REST + 2 * FP8_LAYER
    assert not [e for e in build_events(r, inv, 0) if e.part == FP8_COPIES]
    assert FP8_COPIES not in t.peak_parts
    # without param_gather the linears are bf16 weights (2 B) and FP8 copies beside them
    _r2, inv2, t2 = timeline(tiny(fp8={"recipe": "tensorwise"}))
    assert inv2.per_gpu["weights"] == 2 * (REST + LINEAR)
    assert t2.peak_parts[FP8_COPIES] == 2 * FP8_LAYER
    assert t2.peak_allocated_bytes - t.peak_allocated_bytes == 2 * LINEAR  # 163,840 B


def test_fp8_params_are_gathered_in_fp8_layer_by_layer():
    """FSDP2 with torchao's FP8 all-gather (tensorwise alone): a layer's gather is its FP8
    linears in one layout, no transpose (torchao/float8/fsdp_utils.py; state/fp8.py), one
    fp32 scale each, 4 x (4,096 + 4) + 3 x (8,192 + 4) = 40,988 B, and its two norms in bf16
    (128 x 2 = 256 B): 41,244 B; no FP8 copies besides (was 84,736 B with mxfp8's two
    layouts, which torchao refuses to all-gather)."""
    fp8 = {"recipe": "tensorwise", "param_gather": True}
    raw = tiny({"data": 2, "zero_stage": 3}, framework="fsdp", fp8=fp8)
    r, inv, _ = timeline(raw)
    events = build_events(r, inv, 0)
    gathered = [e.nbytes for e in events if e.part == "gathered weights" and e.alloc]
    assert 41_244 in gathered
    assert not [e for e in events if e.part == FP8_COPIES]


# --- import and emit ---------------------------------------------------------------------------


def test_nvidias_llama3_8b_fp8_script_maps_both_flags():
    imp = import_configs([FIXTURES / "train_llama3_8b_h100_fp8.sh"], ImportOptions(gpus=8))
    s = imp.loaded.scenario
    assert s.training.loss_fusion == "native"  # --cross-entropy-loss-fusion, impl absent
    assert s.training.fp8 is not None and s.training.fp8.param_gather
    notes = "\n".join(imp.note_lines())
    assert "--cross-entropy-fusion-impl: absent: Megatron-Core's default, native" in notes
    assert "--fp8-param-gather" not in notes and "--cross-entropy-loss-fusion" not in notes


@pytest.mark.parametrize(
    ("flags", "fusion"),
    [
        ("", "none"),
        ("--cross-entropy-loss-fusion", "native"),
        ("--cross-entropy-loss-fusion --cross-entropy-fusion-impl te", "te"),
        ("--cross-entropy-fusion-impl te", "none"),  # no effect without the fusion flag
    ],
)
def test_megatron_cross_entropy_flags(tmp_path, flags, fusion):
    script = tmp_path / "run.sh"
    script.write_text(
        "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 512 "
        f"--max-position-embeddings 512 {flags}\n"
    )
    imp = import_configs([script], ImportOptions(gpus=1))
    assert imp.loaded.scenario.training.loss_fusion == fusion


def test_megatron_emit_round_trips_loss_fusion_and_fp8_params(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "name: mg\nmodel: {preset: llama-3-8b}\n"
        "training: {framework: megatron, seq_len: 8192, loss_fusion: te,\n"
        "  precision: {weights: bf16, gradients: bf16, master: fp32},\n"
        "  fp8: {recipe: delayed, param_gather: true}, attention_kernel: flash}\n"
        "parallel: {data: 8, zero_stage: 1}\nhardware: {preset: dgx-h100}\n"
    )
    s = tiersim.load_scenario(path).scenario
    emitted = emit(s, "megatron")
    for flag in ("--fp8-param-gather", "--cross-entropy-loss-fusion",
                 "--cross-entropy-fusion-impl te"):  # fmt: skip
        assert flag in emitted.text
    out = tmp_path / f"emitted.{EXTENSIONS['megatron']}"
    out.write_text(emitted.text)
    hf = Path(__file__).parent / "fixtures" / "llama-3-8b.config.json"
    back = import_configs([out], ImportOptions(name="mg", hf_config=str(hf))).loaded.scenario
    assert back.training.loss_fusion == "te"
    assert back.training.fp8 == s.training.fp8


@pytest.mark.parametrize(
    ("training", "said"),
    [
        ({"implementation": "huggingface", "loss_fusion": "native"}, "computes the loss"),
        ({"loss_fusion": "te", "precision": {"weights": "fp32"}}, "no fp32 copy"),
    ],
)
def test_a_loss_fusion_that_changes_nothing_is_noted(cli, tmp_path, training, said):
    path = tmp_path / "s.yaml"
    body = {"seq_len": 128, **training}
    path.write_text(f"name: n\nmodel: {TINY}\ntraining: {body}\n".replace("'", '"'))
    code, _out, err = cli("inventory", path)
    assert code == 0 and "training.loss_fusion" in err and said in err and "[W-NO-EFFECT]" in err


def test_loss_fusion_pages_llama3_8b_table_is_what_inventory_gives():
    """docs/loss-fusion.md's table of NVIDIA's Llama 3 8B FP8 script quotes the device peak
    `tiersim inventory` prints for each row (it went stale once: keep it current)."""
    from docs_text import page

    from tiersim.api import override
    from tiersim.state.resolved import resolve
    from tiersim.state.step_memory import gpu_timeline

    imp = import_configs([FIXTURES / "train_llama3_8b_h100_fp8.sh"], ImportOptions(gpus=8))
    rows = {
        "before (both flags only noted)": [
            "training.loss_fusion=none",
            "training.fp8.param_gather=false",
        ],
        "now (`loss_fusion: native`, `fp8.param_gather: true`)": [],
        "with `--cross-entropy-fusion-impl te` added": ["training.loss_fusion=te"],
    }
    text = page("loss-fusion")
    for label, sets in rows.items():
        loaded = override(imp.loaded, sets)
        r = resolve(loaded.scenario)
        peak = gpu_timeline(r, build_inventory(r)).peak_total_bytes
        (line,) = [ln for ln in text.splitlines() if ln.startswith(f"| {label} |")]
        assert line.split("|")[2].strip().startswith(f"{peak / 1e9:.2f} GB"), label
