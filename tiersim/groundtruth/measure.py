"""Ground truth: train real steps in PyTorch and measure every class of state tiersim predicts.

The model is tiersim's own modules built from its dimensions (`tiersim.groundtruth.torchmodels`,
compared with the `megatron` accounting), or with `implementation="huggingface"` a transformers
model (`tiersim.groundtruth.hfmodels`, compared with the `huggingface` accounting for the device,
layers and outside them: measure_hf.py); trained in one
precision throughout (bf16 or fp32: weights, gradients and optimizer state all in it, no master
copy), one warm-up step and then the measured step, so optimizer state already exists while the
measured step runs, as it does in steady-state training. Per class:

- weights, gradients, optimizer: bytes of the real tensors (each storage once: the tied output
  projection is the embedding tensor). Adam's and Adafactor's scalar `step` counters (one 4-byte
  0-d tensor per parameter tensor) are NOT counted as optimizer state, because tiersim counts
  optimizer state per parameter; they are reported apart as `optimizer_step_counters_bytes`.
  With that, these three classes must equal tiersim's prediction exactly.
- master: pure-precision training keeps no master copy; both sides are 0.
- activations: every storage autograd saves for backward during the measured forward pass
  (`torch.autograd.graph.saved_tensors_hooks`), each storage counted once, parameters and
  buffers (RoPE tables, the causal mask) excluded, attributed to the transformer layer that saved
  it first. The class compares the layers' total with tiersim's `layers × layer_activation_bytes`;
  what the embedding, final norm, logits and loss retain is reported apart (the megatron
  accounting does not count it; the huggingface one does, and its class includes it).
- peak: the allocator's peak during the measured step, on a GPU; with `--implementation
  huggingface` on the CPU too, from the profiler's memory events (groundtruth/step_timeline.py),
  and compared with the peak of tiersim's memory timeline of the step (state/step_memory.py).

Why measured activations differ from Korthikanti et al.'s s·b·h·(34 + 5·a·s/h) (16-bit), for
these modules (s sequence, b micro-batch, h hidden, a heads, f MLP width, q = a·head_dim,
kv = kv_heads·head_dim; byte counts for bf16):

- No dropout (p = 0, as in current LLM pre-training): the formula's two dropout masks (sbh)
  and attention dropout's mask and output (3·a·s²·b) are absent.
- Attention through `scaled_dot_product_attention` (flash kernels, on CPU and GPU) keeps no s×s
  matrix: the softmax output (2·a·s²·b) is absent; it keeps q, k, v and its output (as the
  formula does) plus a log-sum-exp of 4·a·s·b bytes (fp32). With `--attention math` (explicit
  scores, softmax in fp32 as Hugging Face Llama's eager attention) the fp32 softmax output
  (4·a·s²·b), its bf16 copy (2·a·s²·b) and contiguous copies of q, kᵀ, v and the output made by
  batched matmuls appear instead.
- Norm statistics: LayerNorm keeps its mean and 1/σ (2 × s·b values per norm); the formula
  ignores them.
- RMSNorm (`torch.nn.RMSNorm`) computes in fp32 for bf16 input: each norm keeps an fp32 copy of
  its input and of the normalised value (4sbh + 4sbh) and 1/rms (4sb), instead of the bf16 input
  (2sbh) the formula counts.
- SwiGLU keeps the gate projection's output, SiLU's output, the up projection's output and their
  product (4 × 2sbf) where the formula counts three (6sbf); GeLU keeps its input and output (4sbf).
- GQA: k and v are 2·s·b·kv bytes each, as the formula (generalised in tiersim.state.model) counts.
- Rotary positions add no retained tensors here (the tables are buffers; multiplying by a
  constant keeps only the constant).

`activation_factor` = measured / predicted, written by `--calibrate` into a model preset,
scales tiersim's per-layer activations to this implementation at this shape; the a·s² and s·b
terms scale differently, so recalibrate for a different sequence length.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from tiersim.config.schema import Scenario
from tiersim.core.records import record
from tiersim.core.units import fmt_bytes
from tiersim.groundtruth.calibrate import physical_memory
from tiersim.groundtruth.choices import OPTIMIZERS as OPTIMIZERS  # re-exported
from tiersim.groundtruth.measure_request import SOURCE as SOURCE  # re-exported
from tiersim.groundtruth.measure_request import (
    Request,
    import_torch,
    invalid,
    model_dims,
    named_dims,
    prediction_scenario,
)
from tiersim.state.classes import PLACED
from tiersim.state.inventory import build_inventory
from tiersim.state.model import Transformer
from tiersim.state.resolved import padded_model, resolve

CLASSES = PLACED  # what a real training step holds and measure compares (no workspace)


@record
class Measurement:
    scenario: Scenario
    request: Request
    device: str
    torch_version: str
    parameters: int  # counted on the PyTorch model
    measured: dict[str, int]  # bytes per class
    predicted: dict[str, int]
    activations_per_layer: list[int]
    activations_outside_layers: int
    optimizer_step_counters_bytes: int
    peak_allocated_bytes: int | None  # GPU only
    device_name: str | None = None  # the GPU's name, on a GPU
    named_model: dict[str, Any] = field(default_factory=dict)  # model_dims, without --set
    predicted_per_layer: int | None = None  # huggingface: the accounting for this device
    predicted_layers: tuple[int, ...] = ()  # huggingface: each layer's (dense and MoE differ)
    predicted_outside: int | None = None
    family: str | None = None  # the transformers class run
    predicted_step_peak: int | None = None  # huggingface: the memory timeline's peak

    @property
    def hf(self) -> bool:
        return self.request.implementation == "huggingface"

    @property
    def predicted_peak_bytes(self) -> int:
        """The memory timeline's peak where it was built (huggingface), else the classes."""
        if self.predicted_step_peak is not None:
            return self.predicted_step_peak
        return sum(self.predicted.values())

    def activation_factor(self) -> float:
        """Measured / predicted layer activations, against tiersim's uncalibrated formula."""
        if self.hf:  # the transformers accounting, layers and outside
            return self.measured["activations"] / self.predicted["activations"]
        uncalibrated = self.predicted["activations"] / self.scenario.model.activation_factor
        return self.measured["activations"] / uncalibrated


# --- the prediction ----------------------------------------------------------------------------


def predicted_bytes(s: Scenario) -> dict[str, int]:
    per_gpu = build_inventory(resolve(s)).per_gpu
    return {cls: per_gpu[cls] for cls in CLASSES}


def _predicted(s: Scenario, got: dict[str, Any]) -> dict[str, int]:
    """The inventory's classes; measured transformers activations: layers and outside, for the
    device measured on."""
    out = predicted_bytes(s)
    if "per_layer_predicted" in got:
        layers = sum(got["layers_predicted"])
        out["activations"] = layers + got["outside_predicted"]
    return out


def needed_bytes(s: Scenario) -> tuple[int, int]:
    """Rough memory a measured step needs, as (the state's, the micro-batch's tokens'): weights,
    gradients and optimizer state; twice the layer activations (for what the embeddings and
    norms keep) and the logits with their fp32 copy and loss (~12 B per value)."""
    p = predicted_bytes(s)
    logits = 12 * s.seq_len * s.training.micro_batch_size * s.model.vocab
    return p["weights"] + p["gradients"] + p["optimizer"], 2 * p["activations"] + logits


# --- measuring ---------------------------------------------------------------------------------


def _device(torch: Any, name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise invalid(
            "device", "'cuda' requested but PyTorch sees no GPU (use --device cpu or auto)"
        )
    return name


def check_fits(torch: Any, s: Scenario, device: str) -> None:
    if device == "cuda":
        available: int | None = torch.cuda.mem_get_info()[0]
    else:
        available = physical_memory()
    state, tokens = needed_bytes(s)
    if available is None or state + tokens <= 0.8 * available:
        return
    needs = f"one measured step needs about {fmt_bytes(state + tokens)}"
    has = f"this {device} has {fmt_bytes(available)}"
    if tokens > state:  # the sequences, not the model: a narrower model would not help
        seq, mbs = s.seq_len, s.training.micro_batch_size
        raise invalid(
            "training.micro_batch_size" if mbs > seq else "training.seq_len",  # the larger
            f"{seq:,} tokens x micro-batch {mbs:,}: {needs}, {fmt_bytes(tokens)} of it the "
            f"activations and logits of those tokens, but {has} (expected fewer tokens a "
            "micro-batch: a shorter seq_len or a smaller micro_batch_size)",
        )
    raise invalid(
        "model",
        f"{needs} but {has}: pick a smaller model or shrink it, "
        "e.g. --set model.layers=2 (fewer layers keep the activation factor --calibrate "
        "writes valid for this model; a narrower one, --set model.hidden=256, does not)",
    )


def train_and_measure(torch: Any, s: Scenario, req: Request, device: str) -> dict[str, Any]:
    from tiersim.groundtruth import torchmodels as tm

    model = padded_model(s)  # the embedding and head as the framework pads them
    assert isinstance(model, Transformer)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[req.dtype]
    shape = (s.training.micro_batch_size, s.seq_len)
    rng_devices = [torch.cuda.current_device()] if device == "cuda" else []
    with torch.random.fork_rng(devices=rng_devices), torch.device(device):
        torch.manual_seed(req.seed)
        net = tm.Decoder(model, s.seq_len, req.attention).to(dtype)
        ids = [torch.randint(0, model.vocab, shape) for _ in range(2)]
    params = list(net.parameters())
    optimizer = tm.make_optimizer(req.optimizer, list(net.named_parameters()))
    tm.train_step(net, optimizer, ids)  # warm-up: creates the optimizer state
    saved = tm.SavedTensors(model.layers, [*params, *net.buffers()])
    handles = saved.watch(net.layers)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    tm.train_step(net, optimizer, ids, saved)
    peak = None
    if device == "cuda":
        torch.cuda.synchronize()
        peak = int(torch.cuda.max_memory_allocated())
    for h in handles:
        h.remove()
    state, counters = tm.optimizer_bytes(optimizer)
    measured = {
        "weights": tm.storage_bytes(params),
        "gradients": tm.storage_bytes(p.grad for p in params if p.grad is not None),
        "master": 0,
        "optimizer": state,
        "activations": sum(saved.per_layer),
    }
    return {
        "parameters": sum(p.numel() for p in params),
        "measured": measured,
        "per_layer": saved.per_layer,
        "outside": saved.outside,
        "counters": counters,
        "peak": peak,
    }


def _device_name(torch: Any, device: str) -> str | None:
    return str(torch.cuda.get_device_name()) if device == "cuda" else None


def measure(req: Request) -> Measurement:
    """Build the model, train a warm-up and a measured step, and compare with the prediction."""
    scenario = prediction_scenario(req)
    torch = import_torch()
    device = _device(torch, req.device)
    check_fits(torch, scenario, device)
    try:
        if req.implementation == "huggingface":
            from tiersim.groundtruth.measure_hf import train_and_measure_hf

            got = train_and_measure_hf(scenario, req, device)
        else:
            got = train_and_measure(torch, scenario, req, device)
    except torch.cuda.OutOfMemoryError as exc:  # the estimate in check_fits was too low
        first = (str(exc).strip().splitlines() or ["out of memory"])[0]
        raise invalid(
            "model",
            f"the measured step ran out of memory on {device} ({first}): pick a smaller model "
            "or shrink it, e.g. --set model.layers=2, or give a shorter --seq-len",
        ) from None
    return Measurement(
        scenario=scenario,
        request=req,
        device=device,
        torch_version=torch.__version__,
        device_name=_device_name(torch, device),
        parameters=got["parameters"],
        measured=got["measured"],
        predicted=_predicted(scenario, got),
        predicted_per_layer=got.get("per_layer_predicted"),
        predicted_layers=tuple(got.get("layers_predicted", ())),
        predicted_outside=got.get("outside_predicted"),
        family=got.get("family"),
        predicted_step_peak=got.get("predicted_step_peak"),
        activations_per_layer=got["per_layer"],
        activations_outside_layers=got["outside"],
        optimizer_step_counters_bytes=got["counters"],
        peak_allocated_bytes=got["peak"],
        named_model=named_dims(req) if req.overrides else model_dims(scenario.model),
    )
