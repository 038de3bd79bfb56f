"""The kernels of one transformer layer, and of the embedding and output head, for one
micro-batch on one GPU: every GEMM by its shape, every memory-bound kernel by its bytes.

GEMMs (`tiersim.hardware.gemm`: peak x `gpu.efficiency` x the best tile's wave quantization
and L2 feed, at the compute precision's operand bytes), with T = s·b
tokens, tensor-parallel size t, q = heads·head_dim, kv = kv_heads·head_dim, f = ffn_hidden:
- forward: QKV (T x (q+2kv)/t, K = h), attention projection (T x h, K = q/t), FC1
  (T x f/t, or 2f/t gated, K = h), FC2 (T x h, K = f/t); attention QK^T (s x k, K = head_dim)
  and PV (s x head_dim, K = k), batched over b·heads/t, k the keys a query attends to (s; a
  sliding-window layer's min(s, w));
- backward: each linear's input gradient (T x K by N) and weight gradient (K x N by T), and
  attention's four batched products (dQ, dK, dP, dV);
- recompute: full, the whole forward again; selective, the attention core again where its
  checkpoint holds it (`Accounting.core_checkpointed`: not Megatron-DeepSpeed's FlashAttention);
  selective_op, the mms torchtitan's policy does not save (workload/op_recompute.py); the
  last stage's MTP modules' rerun with the rest unit (workload/mtp_time.py).
Eager attention under Megatron's implementation, where the GPU's kernel table measures its op
set (`attention.eager`), is timed whole from it (tiersim/workload/eager_attention.py).
Attention's products as `training.attention_kernel` runs them (tiersim/workload/attention.py):
eager all s x k scores, backward twice the forward; flash (and sdpa without a padding mask)
the causal tiles only, (n + 1) / 2n of them at n = ceil(s / 128), backward 2.5x the forward
(QK^T recomputed); sdpa behind a padding mask (huggingface) every tile, backward 2.5x.

Memory-bound kernels per element of the hidden states, the MLP's width and the attention
scores (e, e_f, e_a): tiersim/workload/layer_bytes.py, at HBM bandwidth x
`gpu.memory_efficiency`.
Output head (last stage): the final LayerNorm fwd + bwd 16·e, the fp32 vocabulary-parallel
cross-entropy 50 B per logit (T·V/t: the logits cast, max, exp, sum, the loss and its
gradient), a third of those bytes counted in forward and two thirds in backward.
Embedding (first stage): lookup, position add and dropout, fwd + bwd, 16·e on the full
hidden states.
"""

from __future__ import annotations

from dataclasses import replace

from tiersim.config.schema import PRECISION_BYTES
from tiersim.core.memo import OwnerMemo
from tiersim.core.records import record
from tiersim.hardware.gemm import gemm_s
from tiersim.hardware.kernel_tables import kernel_table
from tiersim.state.activation_policy import core_recomputed, separate_norms
from tiersim.state.layer_sac import checkpointed_share
from tiersim.state.model import Transformer
from tiersim.state.resolved import Resolved
from tiersim.workload import megatron_elementwise as mcore
from tiersim.workload.attention import FUSED_BACKWARD, AttentionCore, attention_core
from tiersim.workload.eager import compile_bytes
from tiersim.workload.eager_attention import MeasuredEager, eager_from_table
from tiersim.workload.fp8 import layer_quantize_bytes, quantize_slowdown
from tiersim.workload.layer_bytes import ElementBytes, element_bytes
from tiersim.workload.mtp_time import mtp_forward_s, mtp_recompute_s
from tiersim.workload.op_recompute import op_recompute_gemm_s
from tiersim.workload.ring_attention import context_ring

HEAD_NORM_B, LOGIT_B, EMBEDDING_B = 16.0, 50.0, 16.0


@record
class Kernels:
    """Seconds of one pass over one micro-batch, matrix multiplies and memory-bound apart."""

    gemm_s: float = 0.0
    memory_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.gemm_s + self.memory_s

    def __add__(self, other: Kernels) -> Kernels:
        return Kernels(self.gemm_s + other.gemm_s, self.memory_s + other.memory_s)

    def on_share(self, share: float) -> Kernels:
        """This pass on a share of the layers (training.recompute_every N: 1/N rerun)."""
        return self if share == 1 else Kernels(self.gemm_s * share, self.memory_s * share)


@record
class LayerKernels:
    forward: Kernels
    backward: Kernels
    recompute: Kernels


class _Shape:
    """The per-GPU sizes of one micro-batch (see the module docstring's names)."""

    def __init__(self, r: Resolved, model: Transformer, index: int = 0) -> None:
        x, hw = r.execution, r.machine
        par, gpu = x.parallel, hw.gpu
        self.t = par.tensor
        # context parallelism (tiersim/workload/context.py): this rank's s/c queries (and
        # tokens) over the whole sequence's keys; the causal share is the whole sequence's
        self.full_seq = x.seq_len
        self.seq, self.b = x.seq_len // par.context, x.training.micro_batch_size
        self.tokens = self.seq * self.b
        self.model, self.index = model, index
        compute = x.training.precision.compute_precision  # the copy the GEMMs use
        self.compute, self.peak_flops = compute, gpu.peak_flops
        self.peak, self.operand_bytes = gpu.peak_flops[compute], PRECISION_BYTES[compute]
        self.eta, self.sms, self.l2_bw = gpu.efficiency, gpu.sm_count, gpu.l2_bandwidth
        # the GPU's measured kernel rates (tiersim/hardware/kernel_tables.py), if it has them
        self.table = kernel_table(gpu.kernels) if gpu.kernels else None
        self.fp8 = x.training.fp8
        hbm = hw.tiers[gpu.memory]
        self.hbm_bw = min(hbm.read_bw, hbm.write_bw) * gpu.memory_efficiency
        self.quant_slowdown = quantize_slowdown(self.table, self.fp8, gpu.memory_efficiency)
        hidden = float(self.tokens * model.hidden)
        self.e = hidden / self.t if par.sequence else hidden
        self.e_full = hidden
        self.e_f = self.tokens * model.ffn_hidden / self.t
        # q and k elements (the rotary embedding's), on this GPU's heads
        self.e_qk = self.tokens * (model.heads + model.kv_heads) * model.head_dim / self.t
        self.e_qkv = self.e_qk + self.tokens * model.kv_heads * model.head_dim / self.t
        self.heads = max(1, model.heads // self.t)
        self.keys = model.attention_keys(self.full_seq, index)  # layer `index`'s
        self.e_a = float(self.b * self.heads * self.seq * self.keys)

    def gemm(self, m: int, n: int, k: int, batch: int = 1, dtype: str = "") -> float:
        """Seconds of a GEMM in `dtype` (default: the compute precision): from the GPU's kernel
        table where it measures the dtype, else peak x efficiency x the best tile's share."""
        dtype = dtype or self.compute
        if min(m, n, k, batch) < 1:
            return 0.0
        if self.table is not None:
            recipe = self.fp8.gemm_kernel if dtype == "fp8" and self.fp8 is not None else ""
            rate = self.table.gemm_rate(dtype, m * batch, n, k, self.sms, recipe)
            if rate is not None:
                return 2.0 * m * n * k * batch / rate
        peak, operand = self.peak_flops[dtype], PRECISION_BYTES[dtype]
        return gemm_s(m, n, k, peak, self.eta, self.sms, batch, self.l2_bw, operand)

    def linear(self, m: int, n: int, k: int, weight_grad: bool = False) -> float:
        """A linear's GEMM: FP8 under `training.fp8` (a weight gradient's as the recipe says)."""
        fp8 = self.fp8 is not None and (self.fp8.weight_grad_fp8 or not weight_grad)
        return self.gemm(m, n, k, dtype="fp8" if fp8 else self.compute)

    def attention_dtype(self) -> str:
        return "fp8" if self.fp8 is not None and self.fp8.attention else self.compute

    def fused_attention(self, r: Resolved, core: AttentionCore) -> tuple[float, float] | None:
        """Forward and backward seconds of the attention core from the kernel table's fused
        attention rates (FlashAttention's FLOP count: 4·s·k·head_dim per head forward, half
        of it where every query sees all keys before it, s = k, as the causal kernels
        count; the backward 2.5x the forward's); None: no measured kernel for it."""
        kernel = self.fused_kernel(r, core)
        if kernel is None or self.table is None:
            return None
        d = self.model.head_dim
        flops = 4.0 * self.b * self.heads * self.seq * self.keys * d
        if self.keys >= self.seq:
            flops /= 2.0
        fwd = self.table.attention_rate(kernel, "forward", True, d, self.seq)
        bwd = self.table.attention_rate(kernel, "backward", True, d, self.seq)
        return flops / fwd, FUSED_BACKWARD * flops / bwd

    def fused_kernel(self, r: Resolved, core: AttentionCore) -> str | None:
        """The table's fused attention kernel that runs the core (None: none measured)."""
        if self.table is None or r.accounting.kernel == "eager" or core.mask_bytes != (0, 0):
            return None
        kernel = r.execution.training.flash_kernel or "flash2"
        if r.accounting.kernel == "sdpa":
            kernel = "flash2"  # PyTorch's SDPA flash backend is FlashAttention-2
        if kernel not in self.table.attention or self.attention_dtype() == "fp8":
            return None
        return kernel

    def measured_eager(self, r: Resolved) -> MeasuredEager | None:
        """The eager core from the table's measured op set (workload/eager_attention.py)."""
        batch, d = self.b * self.heads, self.model.head_dim
        dtype = self.attention_dtype()
        return eager_from_table(r, self.table, dtype, batch, self.seq, self.keys, d)

    def memory(self, nbytes: float) -> float:
        return nbytes / self.hbm_bw

    def linears(self) -> list[tuple[int, int, int]]:
        """(M, N, K) of the layer's four forward linears."""
        m, t, T = self.model, self.t, self.tokens
        q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
        fc1 = (2 if m.gated_mlp else 1) * m.ffn_hidden
        return [
            (T, max(1, (q + 2 * kv) // t), m.hidden),
            (T, m.hidden, max(1, q // t)),
            (T, max(1, fc1 // t), m.hidden),
            (T, m.hidden, max(1, m.ffn_hidden // t)),
        ]

    def attention_forward(self) -> float:
        """QK^T and PV over all s x k scores (the eager kernel's; a fused one scales them)."""
        s, k, d, batch = self.seq, self.keys, self.model.head_dim, self.b * self.heads
        dtype = self.attention_dtype()
        return self.gemm(s, k, d, batch, dtype) + self.gemm(s, d, k, batch, dtype)

    def attention_core(self, r: Resolved, eager_bytes: tuple[float, float]) -> AttentionCore:
        window = self.keys if self.keys < self.full_seq else None
        acc = r.accounting
        return attention_core(
            acc.kernel, acc.implementation, self.full_seq, self.keys, window, eager_bytes
        )

    def core_bytes(self, core: AttentionCore, direction: int) -> float:
        """The core's HBM bytes in one pass (0 forward, 1 backward): per score, per mask
        element (the mask is one per sequence, shared by the heads)."""
        scores = core.computed * self.e_a
        per_mask = core.mask_bytes[direction] / self.heads
        return scores * (core.score_bytes[direction] + per_mask)


def kernel_timed(model: object) -> bool:
    """Whether `model`'s layers are timed kernel by kernel here: a transformer without
    mixture-of-experts or latent attention. The others (and a model known only by its
    parameter count) are timed by their FLOPs and bytes (tiersim.workload.stage_times), so
    `training.attention_kernel` does not change their time."""
    return isinstance(model, Transformer) and model.moe is None and model.mla is None


def _attention(r: Resolved, sh: _Shape, core: AttentionCore):
    """The attention core's forward and backward seconds, the core (its score bytes the
    measured eager op set's where the table times it) and TE's ring (None: no ring)."""
    fused, kernel = sh.fused_attention(r, core), sh.fused_kernel(r, core)
    eager = None if fused is not None else sh.measured_eager(r)
    if eager is not None:  # the table's measured eager op set, and the bytes it leaves out
        fused = (eager.forward_s, eager.backward_s)
        core = replace(core, score_bytes=eager.score_bytes)
    # under TE's P2P ring, step by step (a windowed layer: as one kernel)
    ring = (
        context_ring(r, sh.model, sh.table, kernel, sh.hbm_bw) if sh.keys >= sh.full_seq else None
    )
    if ring is not None:
        return ring.forward_s, ring.backward_s, core, ring
    if fused is None:
        attention = core.computed * sh.attention_forward()
        return attention, core.backward_products * attention, core, None
    return *fused, core, None


def attention_pass_s(r: Resolved, model: Transformer) -> tuple[float, float]:
    """Forward and backward seconds of a layer's attention core for one micro-batch, as
    `layer_kernels` times them (what context parallelism's ring transfers run beside)."""
    sh = _Shape(r, model)
    forward, backward, _, _ = _attention(
        r, sh, sh.attention_core(r, element_bytes(r, model).scores)
    )
    return forward, backward


def layer_kernels(r: Resolved, model: Transformer, index: int = 0) -> LayerKernels:
    """Layer `index`'s forward, backward and recompute kernels for one micro-batch."""
    sh = _Shape(r, model, index)
    b = element_bytes(r, model)
    attention, attention_b, core, ring = _attention(r, sh, sh.attention_core(r, b.scores))
    linears = sh.linears()
    lin_f = sum(sh.linear(m, n, k) for m, n, k in linears)
    lin_b = sum(sh.linear(m, k, n) + sh.linear(k, n, m, weight_grad=True) for m, n, k in linears)
    quant_f, quant_b = layer_quantize_bytes(r, linears, sh.e, sh.quant_slowdown)
    scores_f, scores_b = (sh.core_bytes(core, i) for i in (0, 1))
    if ring is not None:  # the ring's output merges, copies and gradient sums
        scores_f, scores_b = scores_f + ring.forward_bytes, scores_b + ring.backward_bytes
    elementwise_f, elementwise_b = _elementwise_bytes(r, sh, b)
    forward = Kernels(lin_f + attention, sh.memory(elementwise_f + scores_f + quant_f))
    backward = Kernels(lin_b + attention_b, sh.memory(elementwise_b + scores_b + quant_b))
    recompute = {
        "none": Kernels(),
        "full": forward.on_share(checkpointed_share(r.accounting.recompute_every)),
        "selective": selective_recompute(r, sh, b, attention, scores_f),
        # torchtitan's op-level policy: its unsaved mms and the forward's memory-bound kernels
        "selective_op": Kernels(op_recompute_gemm_s(sh), sh.memory(elementwise_f + quant_f)),
    }[r.execution.training.recompute]
    return LayerKernels(forward, backward, recompute)


def _elementwise_bytes(r: Resolved, sh: _Shape, b: ElementBytes) -> tuple[float, float]:
    """The layer's memory-bound bytes outside attention's core, forward and backward: as
    `training.compile` says what runs them (eager PyTorch or torch.compile's kernels,
    tiersim/workload/eager.py), else the fused kernels' (`b`, megatron_elementwise.py's RoPE)."""
    compiled = r.execution.training.compile
    if compiled is None:
        rope = mcore.fused_rope_bytes(r, sh.model, sh.e_qk)
        return tuple(b.hidden[i] * sh.e + b.ffn[i] * sh.e_f + rope for i in (0, 1))  # type: ignore[return-value]
    eb = compile_bytes(compiled, r.accounting.implementation)
    return tuple(  # type: ignore[return-value]
        eb.hidden[i] * sh.e
        + eb.rotary[i] * sh.e_qk
        + eb.ffn[i] * sh.e_f
        + eb.qkv_split[i] * sh.e_qkv
        for i in (0, 1)
    )


NORM_RECOMPUTE_B = 4  # per hidden element: two norms, each reading its input, writing its output


def selective_recompute(
    r: Resolved, sh: _Shape, b: ElementBytes, attention: float, scores_f: float
) -> Kernels:
    """Selective recompute's kernels: the attention core (QK^T, PV and the score bytes; a
    fused kernel's forward) where its checkpoint holds it (`core_recomputed`, the decision
    what the layer keeps reads: not Megatron-DeepSpeed's FlashAttention), and with
    `training.recompute_modules` each module's forward again: mlp its two or three GEMMs
    and elementwise bytes, layernorm the norms of their own under the TE layer spec
    (`separate_norms`: none in a dense layer), each read and written in compute precision."""
    modules = r.accounting.recompute_modules
    out = Kernels()
    if core_recomputed(r.accounting):
        out += Kernels(attention, sh.memory(scores_f))
    if "mlp" in modules:
        out += Kernels(sum(sh.gemm(m, n, k) for m, n, k in sh.linears()[2:]))
        out += Kernels(memory_s=sh.memory(b.ffn[0] * sh.e_f))
    norms = sum(separate_norms(sh.model, sh.index)) if "layernorm" in modules else 0
    if norms:
        per_norm = NORM_RECOMPUTE_B / 2 * r.accounting.compute_bytes * sh.e
        out += Kernels(memory_s=sh.memory(norms * per_norm))
    return out


def head_kernels(r: Resolved, model: Transformer) -> tuple[Kernels, Kernels]:
    """The output head's forward and backward: final norm, logits GEMM, cross-entropy."""
    sh = _Shape(r, model)
    T, h, vt = sh.tokens, model.hidden, max(1, -(-model.vocab // sh.t))
    memory = sh.memory(HEAD_NORM_B * sh.e + LOGIT_B * T * vt)
    forward = Kernels(sh.gemm(T, vt, h), memory / 3.0)
    backward = Kernels(sh.gemm(T, h, vt) + sh.gemm(h, vt, T), memory * 2.0 / 3.0)
    if model.mtp_layers:  # DeepSeek-V3's MTP modules, timed by their FLOPs (workload/mtp_time)
        mtp = mtp_forward_s(r, model)
        forward, backward = forward + Kernels(mtp), backward + Kernels(2.0 * mtp)
    return forward, backward


def embedding_kernels(r: Resolved, model: Transformer) -> tuple[Kernels, Kernels]:
    """The embedding's lookup, position add and dropout, forward and backward."""
    sh = _Shape(r, model)
    half, dense = EMBEDDING_B * sh.e_full / 2.0, mcore.dense_gradient_bytes(r, model)
    return Kernels(memory_s=sh.memory(half)), Kernels(memory_s=sh.memory(half + dense))


def overhead(r: Resolved) -> float:
    """The compute-time multiplier a user calibrated on their own run
    (`parallel.pipeline_engine_overhead`; 1 unless given)."""
    return 1.0 + r.execution.parallel.pipeline_engine_overhead


def unit_kernels(
    r: Resolved,
    model: Transformer,
    is_layer: bool,
    first_stage: bool,
    last_stage: bool,
    index: int = 0,
) -> tuple[Kernels, Kernels, Kernels]:
    """Forward, backward and recompute kernels of one unit (layer `index`, or the stage's
    rest: the embedding on the first stage, the output head on the last); worked out once a
    point (its unit, the step's breakdown and the pipeline's stage times each ask)."""
    key = (id(model), is_layer, first_stage, last_stage, index)
    return _UNITS.get(
        r, key, model, lambda: _unit_kernels(r, model, is_layer, first_stage, last_stage, index)
    )


_UNITS = OwnerMemo()  # the latest point's units' kernels (tiersim.core.memo)


def _unit_kernels(
    r: Resolved, model: Transformer, is_layer: bool, first_stage: bool, last_stage: bool, index: int
) -> tuple[Kernels, Kernels, Kernels]:
    if is_layer:
        k = layer_kernels(r, model, index)
        return k.forward, k.backward, k.recompute
    fwd, bwd = Kernels(), Kernels()
    if first_stage:
        e_f, e_b = embedding_kernels(r, model)
        fwd, bwd = fwd + e_f, bwd + e_b
    rec = Kernels()
    if last_stage:
        h_f, h_b = head_kernels(r, model)
        fwd, bwd = fwd + h_f, bwd + h_b
        rec = Kernels(mtp_recompute_s(r, model))  # the MTP modules' rerun (none without)
    return fwd, bwd, rec


def unit_times(
    r: Resolved,
    model: Transformer,
    is_layer: bool,
    first_stage: bool,
    last_stage: bool,
    index: int = 0,
) -> tuple[float, float, float]:
    """Forward, backward and recompute seconds of one unit (layer `index`) for one
    micro-batch."""
    scale = overhead(r)
    kernels = unit_kernels(r, model, is_layer, first_stage, last_stage, index)
    fwd, bwd, rec = (scale * k.total_s for k in kernels)
    return fwd, bwd, rec
