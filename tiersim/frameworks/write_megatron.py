"""A scenario as a Megatron-LM launch script: the inverse of tiersim.frameworks.megatron."""

from __future__ import annotations

from tiersim.config.framework_parallel import resolved_parallel
from tiersim.config.schema import Scenario
from tiersim.config.vocab_padding import MEGATRON_DIVISOR, vocab_divisor
from tiersim.core.errors import Problem
from tiersim.frameworks.written import Emitted, framework_note, global_batch, world
from tiersim.state.activation_kinds import DEFAULT_KERNEL
from tiersim.state.optimizers import optimizer as optimizer_named


def _megatron_model(s: Scenario) -> list[str]:
    m = s.model
    if m.parameters is not None or m.hidden is None:
        return []
    flags = [
        f"--num-layers {m.layers}",
        f"--hidden-size {m.hidden}",
        f"--num-attention-heads {m.heads}",
        f"--ffn-hidden-size {m.ffn_hidden}",
        f"--vocab-size {m.vocab}",  # the tokenizer's: Megatron-LM pads it
        f"--normalization {'RMSNorm' if m.norm == 'rmsnorm' else 'LayerNorm'}",
        "--position-embedding-type "
        + {"learned": "learned_absolute", "rope": "rope", "none": "none"}[m.position],
    ]
    # the divisor tiersim's estimate used (1: not padded); Megatron-LM's own default (128)
    # needs no flag, any other does, or the script pads by 128 x TP where tiersim did not
    divisor = vocab_divisor(s) or 1
    if divisor != MEGATRON_DIVISOR or s.training.make_vocab_size_divisible_by is not None:
        flags.append(f"--make-vocab-size-divisible-by {divisor}")
    if m.max_positions is not None:
        flags.append(f"--max-position-embeddings {m.max_positions}")
    if m.kv_heads and m.kv_heads != m.heads:
        flags += ["--group-query-attention", f"--num-query-groups {m.kv_heads}"]
    if m.head_dim:
        flags.append(f"--kv-channels {m.head_dim}")
    flags += ["--swiglu"] if m.gated_mlp else []
    flags += [] if m.tied_embeddings else ["--untie-embeddings-and-output-weights"]
    if not (m.attn_out_bias or m.mlp_bias):
        flags.append("--disable-bias-linear")
        flags += ["--add-qkv-bias"] if m.qkv_bias else []
    # the dropouts given (the reader takes the flags: megatron.py); absent, Megatron-LM's 0.1
    # each ran where the model had 0.0, its masks kept for backward (review 2026-12-07-i)
    for flag, given in (
        ("attention-dropout", m.attention_dropout),
        ("hidden-dropout", m.hidden_dropout),
    ):
        flags += [f"--{flag} {given}"] if given is not None else []
    return flags


def _attention_backend(s: Scenario, notes: list[Problem]) -> str:
    """Always written: a script without the flag runs Megatron-LM's default, auto (flash or
    fused attention), which is not the megatron code's eager default here (megatron.py)."""
    t = s.training
    kernel = t.attention_kernel or DEFAULT_KERNEL[t.implementation]
    backend = "unfused" if kernel == "eager" else "flash"
    if t.attention_kernel is None:
        why = (
            f"null (the {t.implementation} code's default, {kernel}): written as "
            f"--attention-backend {backend}, since Megatron-LM's own default (auto) is flash "
            "or fused attention"
        )
        notes.append(Problem("training.attention_kernel", why, "W-EMIT-APPROXIMATE"))
    return f"--attention-backend {backend}"


def _overlap_flags(s: Scenario, notes: list[Problem]) -> list[str]:
    """The overlap keys as the scenario resolves them (a null key: its framework's default,
    config/framework_parallel.py), each written as the Megatron-LM flag that gives it."""
    p = resolved_parallel(s)
    flags = ["--overlap-grad-reduce"] if p.overlap_gradient_reduce else []
    flags += ["--tp-comm-overlap"] if p.overlap_tensor_forward else []
    if not p.overlap_tensor_backward and s.parallel.tensor > 1:
        why = (
            "false: written without a flag; Megatron-LM runs the backward's tensor-parallel "
            "all-reduce beside the weight-gradient GEMM (its default, which the script keeps)"
        )
        notes.append(Problem("parallel.overlap_tensor_backward", why, "W-EMIT-APPROXIMATE"))
    return flags


def _recompute_flags(s: Scenario, notes: list[Problem]) -> list[str]:
    t, flags = s.training, []
    if t.recompute in ("full", "selective"):
        flags.append(f"--recompute-granularity {t.recompute}")
        if t.recompute == "full":
            flags += ["--recompute-method uniform", "--recompute-num-layers 1"]
        if (t.recompute_every or 1) > 1:
            why = f"{t.recompute_every}: written as full recompute of every layer (Megatron-LM "
            notes.append(
                Problem(
                    "training.recompute_every",
                    why + "has no every-n-th rule)",
                    "W-EMIT-APPROXIMATE",
                )
            )
    elif t.recompute == "selective_op":
        why = "selective_op: torchtitan's op-level policy; Megatron-LM has none (not written)"
        notes.append(Problem("training.recompute", why, "W-EMIT-APPROXIMATE"))
    return flags


def write_megatron(s: Scenario) -> Emitted:
    notes: list[Problem] = []
    framework_note(s, "megatron", "megatron", notes)
    t, p, pl = s.training, s.parallel, s.placement
    flags = _megatron_model(s)
    flags += [
        f"--seq-length {s.seq_len}",
        f"--micro-batch-size {t.micro_batch_size}",
        f"--global-batch-size {global_batch(s)}",
        f"--tensor-model-parallel-size {p.tensor}",
        f"--pipeline-model-parallel-size {p.pipeline}",
    ]
    if p.context > 1:  # Megatron-LM's DP size is the world over TP x PP x CP
        flags.append(f"--context-parallel-size {p.context}")
    if p.virtual_pipeline > 1:
        flags.append(f"--virtual-pipeline-model-parallel-size {p.virtual_pipeline}")
    flags += _stage_flags(s, notes)
    if p.expert > 1:
        flags.append(f"--expert-model-parallel-size {p.expert}")
    flags += ["--sequence-parallel"] if p.sequence else []
    flags += _sharding_flags(s, notes)
    flags += _overlap_flags(s, notes)
    flags += _megatron_precision(s, notes)
    flags += _recompute_flags(s, notes)
    flags.append(_attention_backend(s, notes))
    ours = optimizer_named(t.optimizer)  # the registry's flag (state/optimizers.py)
    optimizer = ours.megatron_optimizer
    if not optimizer:
        notes.append(
            Problem(
                "training.optimizer",
                f"{t.optimizer}: Megatron has adam and sgd",
                "W-EMIT-APPROXIMATE",
            )
        )
    else:
        flags.append(f"--optimizer {optimizer}")
    instead = ours.megatron_runs_instead  # the same two moments a parameter
    if instead:
        why = f"{t.optimizer}: written as Megatron's {optimizer}, which is {instead}"
        notes.append(Problem("training.optimizer", why, "W-EMIT-APPROXIMATE"))
    for cls in ("weights", "gradients", "master", "optimizer", "activations"):
        if getattr(pl, cls) != "hbm":
            why = f"{getattr(pl, cls)}: this Megatron-LM launch keeps every class in HBM"
            notes.append(Problem(f"placement.{cls}", why, "W-EMIT-APPROXIMATE"))
    return Emitted("megatron", _launch_script(s, flags), notes)


def _sharding_flags(s: Scenario, notes: list[Problem]) -> list[str]:
    """ZeRO-1: the distributed optimizer; ZeRO-3 without PP / EP: torch FSDP2 (as the reader
    takes --use-torch-fsdp2, megatron.py); ZeRO-2 has no Megatron-LM counterpart."""
    p = s.parallel
    if p.zero_stage == 1:
        return ["--use-distributed-optimizer"]
    if p.zero_stage == 3 and p.pipeline == 1 and p.expert == 1:
        return ["--use-torch-fsdp2"]
    if p.zero_stage > 1:
        why = f"{p.zero_stage}: Megatron-LM's distributed optimizer shards optimizer state (ZeRO-1)"
        notes.append(Problem("parallel.zero_stage", why, "W-EMIT-APPROXIMATE"))
    return []


def _megatron_precision(s: Scenario, notes: list[Problem]) -> list[str]:
    pr = s.training.precision
    flags: list[str] = []
    if pr.weights == "bf16":
        flags.append("--bf16")
        flags += ["--grad-reduce-in-bf16"] if pr.gradients == "bf16" else []
        expected = ("bf16", pr.gradients if pr.gradients in ("bf16", "fp32") else "fp32", "fp32")
    elif pr.weights == "fp16":
        flags.append("--fp16")
        flags += ["--accumulate-allreduce-grads-in-fp32"] if pr.gradients == "fp32" else []
        expected = ("fp16", pr.gradients if pr.gradients in ("fp16", "fp32") else "fp16", "fp32")
    else:
        expected = ("fp32", "fp32", "none")
    if (pr.weights, pr.gradients, pr.master) != expected or pr.optimizer != "fp32":
        said = f"{pr.weights}/{pr.gradients}/{pr.master}/{pr.optimizer}"
        why = (
            f"{said}: written as Megatron's {'/'.join(expected)}/fp32 "
            "(weights/gradients/master/optimizer)"
        )
        notes.append(Problem("training.precision", why, "W-EMIT-APPROXIMATE"))
    fp8 = s.training.fp8
    if fp8 is not None:  # Megatron-Core's recipes; rowwise is torchao's alone
        flags += ["--fp8-format hybrid", f"--fp8-recipe {fp8.recipe}"]
        flags += ["--fp8-param-gather"] if fp8.param_gather else []
    fusion = s.training.loss_fusion
    flags += ["--cross-entropy-loss-fusion"] if fusion != "none" else []
    flags += ["--cross-entropy-fusion-impl te"] if fusion == "te" else []
    return flags


def _launch_script(s: Scenario, flags: list[str]) -> str:
    gpus = world(s)
    per_node = min(gpus, s.hardware.network.gpus_per_node)
    nodes, rest = divmod(gpus, per_node)
    if rest:
        per_node, nodes = gpus, 1
    lines = [
        "#!/bin/bash",
        f"# written by tiersim from scenario {s.name}: {gpus} GPUs",
        f"GPUS_PER_NODE={per_node}",
        f"NUM_NODES={nodes}",
        "torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES pretrain_gpt.py \\",
    ]
    lines += [f"    {flag} \\" for flag in flags[:-1]] + [f"    {flags[-1]}"]
    return "\n".join(lines) + "\n"


# --- torchtitan -----------------------------------------------------------------------------


def _stage_flags(s: Scenario, notes: list[Problem]) -> list[str]:
    """An uneven split as Megatron-LM's --decoder-first/last-pipeline-num-layers, which give
    the first and the last stage their own count and spread the rest evenly (no virtual
    stages); any other split is said in a note, not written."""
    p = s.parallel
    split = list(p.stage_layers) if p.stage_layers is not None else []
    if len(split) <= 1:
        return []
    first, *middle, last = split
    if p.virtual_pipeline == 1 and len(set(middle)) <= 1:
        even = middle[0] if middle else None
        flags = [f"--decoder-first-pipeline-num-layers {first}"] if first != even else []
        flags += [f"--decoder-last-pipeline-num-layers {last}"] if last != even else []
        return flags
    why = (
        f"{split}: not written (Megatron-LM's --decoder-first/last-pipeline-num-layers give "
        "the first and the last stage their own count and no more, without virtual stages; "
        "its --pipeline-model-parallel-layout is not written by this version)"
    )
    notes.append(Problem("parallel.stage_layers", why, "W-EMIT-APPROXIMATE"))
    return []
