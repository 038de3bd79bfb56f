"""The vocabulary of activation accounting (tiersim/state/activations.py): the groups a kept
tensor is reported under, the implementations and kernels, what decides the bytes
(`Accounting`) and one kept tensor (`Item`)."""

from __future__ import annotations

from tiersim.core.records import record

GROUPS = (
    "norms",
    "attention_inputs",
    "attention_core",
    "mlp",
    "dropout_masks",
    "embeddings",
    "logits_and_loss",
    "layer_inputs",  # all a layer keeps under full recompute
)
IMPLEMENTATIONS = ("megatron", "huggingface", "torchtitan")
KERNELS = ("eager", "sdpa", "flash")
DEFAULT_KERNEL = {"megatron": "eager", "huggingface": "sdpa", "torchtitan": "sdpa"}
CPU_GEMM_ROUTES = ("onednn", "onednn-avx512", "aten")
MEGATRON_DROPOUT = 0.1  # Megatron-LM's --attention-dropout and --hidden-dropout defaults
DEVICE_TERMS = (  # what a GPU keeps differently from a CPU (measure says so)
    "dropout masks: 1-byte bool on CUDA, the model's dtype on CPU",
    "LayerNorm mean and 1/sigma: fp32 on CUDA, the model's dtype on CPU",
    "SDPA with dropout: flash (bf16/fp16) or memory-efficient (fp32) kernel on CUDA, keeping no "
    "s x s tensor; the math path on CPU keeps fp32 scores, mask and dropped probabilities",
)


@record
class Accounting:
    """What decides the bytes: the modelling code, the kernel, dropout, precision, device."""

    implementation: str = "megatron"
    kernel: str = "eager"
    attention_dropout: float = MEGATRON_DROPOUT
    hidden_dropout: float = MEGATRON_DROPOUT
    compute_bytes: int = 2  # bytes per element of the compute copy (4 fp32, 2 bf16)
    device: str = "cuda"
    # with recompute: selective, the modules recomputed (Megatron-Core's --recompute-modules;
    # empty: the attention scores only, Korthikanti et al.'s selective recompute)
    recompute_modules: tuple[str, ...] = ()
    # with recompute: full, every N-th layer checkpointed (training.recompute_every; 1: all)
    recompute_every: int = 1
    # training.fp8 under Transformer Engine: linears keep FP8 inputs (state/activations_fp8.py)
    fp8_linears: bool = False
    # selective recompute: whether the attention core runs inside its checkpoint (Megatron-Core
    # whatever the kernel; transformers' layers under tiersim's checkpoint) or outside it
    # (Megatron-DeepSpeed's FlashAttention, torchtitan's fused SDPA): the one decision what the
    # layer keeps (state/activation_policy.py `kept`) and what its backward reruns
    # (`core_recomputed`, workload/kernels.py and stage_times.py) both read
    core_checkpointed: bool = True
    # the loss computed and differentiated chunk by chunk in forward (state/chunked_loss.py)
    loss_chunks: int = 1
    # on the CPU, the route a bf16 GEMM takes (groundtruth/cpu_gemm_scratchpad.py): "onednn"
    # (AMX: oneDNN's matmul, which packs its second operand into a scratchpad from PyTorch's
    # allocator), "onednn-avx512" (AVX-512 BF16 without AMX: oneDNN's matmul, whose scratchpad
    # is a VNNI copy of one 64-column block of B and an fp32 accumulator,
    # state/onednn_brgemm.py) or "aten" (aten's own gemm, no workspace)
    cpu_gemm: str = "onednn"
    # training.recompute (none, full, selective, selective_op): under huggingface, what the
    # checkpoints hold outside the layers (state/hf_selective.py)
    recompute: str = "none"
    # K/V heads the tensor group keeps together where parallel.tensor exceeds the KV heads:
    # Megatron-Core's gather path keeps one a rank, t in all (workload/qkv_gather.py); 0: the
    # model's kv_heads
    kv_heads_held: int = 0

    def __post_init__(self) -> None:
        if self.implementation not in IMPLEMENTATIONS:
            raise ValueError(f"implementation(={self.implementation!r}) not in {IMPLEMENTATIONS}")
        if self.kernel not in KERNELS:
            raise ValueError(f"kernel(={self.kernel!r}) not in {KERNELS}")
        if self.device not in ("cuda", "cpu"):
            raise ValueError(f"device(={self.device!r}) must be 'cuda' or 'cpu'")
        if self.cpu_gemm not in CPU_GEMM_ROUTES:
            raise ValueError(f"cpu_gemm(={self.cpu_gemm!r}) not in {CPU_GEMM_ROUTES}")


MEGATRON = Accounting()


@record
class Item:
    """One kept tensor (or a few of one kind): bytes for the whole tensor-parallel group."""

    group: str
    name: str
    nbytes: float
    split: bool  # divided over tensor parallelism (else replicated unless sequence parallel)
    scores: bool = False  # an s×s term, recomputed under selective recompute


def divided(items: list[Item], tensor: int, sequence_parallel: bool) -> float:
    """One GPU's bytes: split items over t; replicated ones too under sequence parallelism."""
    return sum(i.nbytes / tensor if i.split or sequence_parallel else i.nbytes for i in items)


def by_group(items: list[Item], tensor: int = 1, sequence_parallel: bool = False) -> dict:
    """Bytes per group (GROUPS order), after tensor division."""
    out = {g: 0.0 for g in GROUPS}
    for i in items:
        out[i.group] += divided([i], tensor, sequence_parallel)
    return out
