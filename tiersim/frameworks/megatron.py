"""A Megatron-LM argument list (megatron/training/arguments.py) or a Megatron-Bridge YAML
config onto the scenario's keys.

Megatron-LM's defaults where a flag is absent, each as its arguments.py sets it: biases on
(--disable-bias-linear turns them off), embeddings tied (--untie-embeddings-and-output-
weights), LayerNorm, learned absolute positions, ffn_hidden_size 4 x hidden (swiglu:
int(4h x 2/3 / 64) x 64), kv_channels hidden / heads, the tokenizer's vocabulary padded to a
multiple of --make-vocab-size-divisible-by (128) x tensor size (megatron_vocab.py), gradients
reduced after backward unless --overlap-grad-reduce, Adam with decoupled weight decay. With
--bf16 the gradients are accumulated and all-reduced in fp32 unless --grad-reduce-in-bf16; the
optimizer keeps fp32 master weights under --bf16 or --fp16. The data-parallel size is the world
size (torchrun's --nproc_per_node x --nnodes, or --gpus) over tensor x pipeline x context.
"""

from __future__ import annotations

from typing import Any

from tiersim.core.errors import Problem
from tiersim.frameworks.arglist import Flag, parse_args
from tiersim.frameworks.bridge import bridge_flags
from tiersim.frameworks.mapping import Mapped
from tiersim.frameworks.megatron_fusion import fp8_settings, loss_fusion
from tiersim.frameworks.megatron_vocab import tokenizer_vocab, vocab_divisor
from tiersim.frameworks.values import ValueProblem, integer, number, text
from tiersim.state.optimizers import framework_names

LAUNCHER = {"nproc_per_node", "nproc-per-node", "nnodes", "node_rank", "node-rank",
            "master_addr", "master-addr", "master_port", "master-port", "rdzv_endpoint",
            "rdzv_backend", "rdzv_id"}  # fmt: skip
# Megatron-LM's AttnBackend (megatron/core/transformer/enums.py) -> training.attention_kernel
ATTENTION = {"flash": "flash", "fused": "flash", "auto": "flash", "unfused": "eager",
             "local": "eager"}  # fmt: skip
FP8_RECIPES = ("tensorwise", "delayed", "rowwise", "blockwise", "mxfp8")
RECOMPUTE_MODULES = ("core_attn", "mlp", "moe", "moe_act", "shared_experts", "mla_up_proj",
                     "layernorm")  # fmt: skip


class _Args:
    """The flags by name (the last of a repeated one), and which were read."""

    def __init__(self, flags: list[Flag], out: Mapped):
        self.by_name: dict[str, Flag] = {}
        for flag in flags:
            known = self.by_name.get(flag.name)
            if known is not None and known.values != flag.values:
                both = f"{' '.join(known.values)}, then {' '.join(flag.values)}"
                why = f"given twice ({both}): the last is read"
                out.note(f"--{flag.name}", why)
            self.by_name[flag.name] = flag
        self.used: set[str] = set()

    def has(self, name: str) -> bool:
        if name in self.by_name:
            self.used.add(name)
            return True
        return False

    def value(self, name: str) -> str | None:
        flag = self.by_name.get(name)
        if flag is None:
            return None
        self.used.add(name)
        if len(flag.values) != 1:
            got = " ".join(flag.values) or "nothing"
            raise ValueProblem(f"--{name}", f"takes one value (got {got})")
        return flag.values[0]

    def integer(self, name: str, low: int = 1) -> int | None:
        raw = self.value(name)
        return None if raw is None else integer(f"--{name}", _known(name, raw), low)


def _known(name: str, raw: str) -> str:
    if "$" in raw:
        why = f"is {raw}, which the script does not set (expected a number; give it in the file)"
        raise ValueProblem(f"--{name}", why)
    return raw


def read_megatron(content: Any, source: str, hf_config: bool) -> Mapped:
    out = Mapped("megatron", source)
    origins: dict[str, str] = {}
    if isinstance(content, dict):
        flags = bridge_flags(content, out, origins)
    else:
        flags, branches = parse_args(content, source)
        if branches:
            out.note("(script)", "has conditions (if): the flags of every branch were read")
    args = _Args(flags, out)
    out.put("training.framework", "megatron", "(Megatron-LM)")
    out.put("training.implementation", "megatron", "(Megatron-LM)")
    _parallel(args, out)
    _batch(args, out)
    _precision(args, out)
    _recompute(args, out)
    vocab_divisor(args, out)
    if hf_config:
        _superseded(args, out)
    else:
        _model(args, out)
    for name, flag in args.by_name.items():
        if name not in args.used:
            why = "a launcher setting (torchrun)" if name in LAUNCHER else ""
            out.unmapped(f"--{name}", " ".join(flag.values) or True, why)
    if origins:  # a Megatron-Bridge config: its own key paths, not the flags they stand for
        out.notes = [Problem(origins.get(p.path, p.path), p.message, p.code) for p in out.notes]
        out.sources = {k: origins.get(v, v) for k, v in out.sources.items()}
    return out


def _world(args: _Args, out: Mapped) -> None:
    per_node = args.integer("nproc_per_node") or args.integer("nproc-per-node")
    nodes = args.integer("nnodes")
    if per_node is not None:
        out.facts["world"] = per_node * (nodes or 1)
        out.facts["world_from"] = out.source  # the file a world-size problem names


def _torch_fsdp2(args: _Args, out: Mapped, pp: int, ep: int) -> None:
    """--use-torch-fsdp2: Megatron-LM wraps the model in torch's FSDP2 (training.py: DP =
    torch_FSDP), weights, gradients and optimizer state sharded over the data ranks (ZeRO-3);
    arguments.py asserts it runs without pipeline or expert parallelism and without the
    distributed optimizer (review 2026-12-07-i: it was "not mapped", the run taken as DDP)."""
    if not args.has("use-torch-fsdp2"):
        return
    bad = {"pipeline-model-parallel-size": pp > 1, "expert-model-parallel-size": ep > 1}
    bad["use-distributed-optimizer"] = args.has("use-distributed-optimizer")
    for flag in (f for f, given in bad.items() if given):
        why = f"is not supported with --{flag} (Megatron-LM's arguments.py asserts it)"
        raise ValueProblem("--use-torch-fsdp2", why)
    out.put("parallel.zero_stage", 3, "--use-torch-fsdp2")


def _parallel(args: _Args, out: Mapped) -> None:
    _world(args, out)
    tp = args.integer("tensor-model-parallel-size") or 1
    pp = args.integer("pipeline-model-parallel-size") or 1
    cp = args.integer("context-parallel-size") or 1
    out.put("parallel.tensor", tp, "--tensor-model-parallel-size")
    out.put("parallel.pipeline", pp, "--pipeline-model-parallel-size")
    if "context-parallel-size" in args.by_name:
        out.put("parallel.context", cp, "--context-parallel-size")
    out.facts["model_parallel"] = tp * pp * cp
    vp = args.integer("virtual-pipeline-model-parallel-size")
    per_stage = args.integer("num-layers-per-virtual-pipeline-stage")
    layers = args.integer("num-layers")
    if vp is None and per_stage is not None and layers is not None:
        if layers % (pp * per_stage):
            why = f"{per_stage} does not divide the {layers} layers over {pp} pipeline stages"
            raise ValueProblem("--num-layers-per-virtual-pipeline-stage", why)
        vp = layers // (pp * per_stage)
    if vp is not None:
        out.put("parallel.virtual_pipeline", vp, "--virtual-pipeline-model-parallel-size")
    _stage_layers(args, out, layers, pp, vp or 1)
    ep = args.integer("expert-model-parallel-size")
    if ep is not None:
        out.put("parallel.expert", ep, "--expert-model-parallel-size")
    etp = args.integer("expert-tensor-parallel-size")
    if etp is not None:
        out.put("parallel.expert_tensor", etp, "--expert-tensor-parallel-size")
    out.put("parallel.sequence", args.has("sequence-parallel"), "--sequence-parallel")
    if args.has("use-distributed-optimizer"):
        out.put("parallel.zero_stage", 1, "--use-distributed-optimizer")
    _torch_fsdp2(args, out, pp, ep or 1)
    out.put(
        "parallel.overlap_gradient_reduce", args.has("overlap-grad-reduce"), "--overlap-grad-reduce"
    )
    # --tp-comm-overlap: the forward's TP collectives split inside their GEMMs (TE userbuffers)
    if args.has("tp-comm-overlap"):
        out.put("parallel.overlap_tensor_forward", True, "--tp-comm-overlap")
    if args.has("no-async-tensor-model-parallel-allreduce"):
        where = "--no-async-tensor-model-parallel-allreduce"
        out.put("parallel.overlap_tensor_backward", False, where)


def _stage_layers(args: _Args, out: Mapped, layers: int | None, pp: int, vp: int) -> None:
    """--decoder-first/last-pipeline-num-layers: an uneven split, the rest spread evenly."""
    first = args.integer("decoder-first-pipeline-num-layers")
    last = args.integer("decoder-last-pipeline-num-layers")
    if first is None and last is None:
        return
    key = (
        "--decoder-first-pipeline-num-layers"
        if first is not None
        else "--decoder-last-pipeline-num-layers"
    )
    middle_stages = pp - (first is not None) - (last is not None)
    rest = (layers or 0) - (first or 0) - (last or 0)
    if (
        layers is None
        or vp != 1
        or middle_stages < 0
        or rest < 0
        or (middle_stages and rest % middle_stages)
        or (not middle_stages and rest)
    ):
        out.unmapped(
            key, first if first is not None else last, "cannot be spread over the stages given"
        )
        return
    even = [rest // middle_stages] * middle_stages if middle_stages else []
    split = ([first] if first is not None else []) + even + ([last] if last is not None else [])
    out.put("parallel.stage_layers", split, key)


def _batch(args: _Args, out: Mapped) -> None:
    given = args.integer("micro-batch-size")
    micro = given or 1
    if given is not None:
        out.facts["micro"] = given
    out.put("training.micro_batch_size", micro, "--micro-batch-size")
    seq = args.integer("seq-length")
    if seq is not None:
        out.put("training.seq_len", seq, "--seq-length")
    total = args.integer("global-batch-size")
    if total is not None:
        out.facts["global"] = total
        out.facts["global_from"] = (out.source, "--global-batch-size")
        out.put("training.global_batch_size", total, "--global-batch-size")
    for name in ("rampup-batch-size",):
        if args.has(name):
            out.unmapped(
                f"--{name}",
                " ".join(args.by_name[name].values),
                "a batch-size ramp: the step modelled is the full batch's",
            )


def _precision(args: _Args, out: Mapped) -> None:
    if args.has("bf16"):
        grads = "bf16" if args.has("grad-reduce-in-bf16") else "fp32"
        precision = {"weights": "bf16", "gradients": grads, "master": "fp32"}
        key = "--bf16"
    elif args.has("fp16"):
        grads = "fp32" if args.has("accumulate-allreduce-grads-in-fp32") else "fp16"
        precision = {"weights": "fp16", "gradients": grads, "master": "fp32"}
        key = "--fp16"
    else:
        precision = {"weights": "fp32", "gradients": "fp32", "master": "none"}
        key = "(no --bf16 or --fp16)"
    for cls, name in precision.items():
        out.put(f"training.precision.{cls}", name, key)
    fmt = args.value("fp8-format")
    if fmt is not None:
        text("--fp8-format", fmt, ("e4m3", "hybrid"))
        # FP8 is training.fp8 alone: TE's FP8 linears under --bf16 keep the compute copy and
        # the activations in bf16 (docs/fp8.md); --fp8-recipe's default is delayed
        recipe = text("--fp8-recipe", args.value("fp8-recipe") or "delayed", FP8_RECIPES)
        said = "--fp8-recipe" if args.value("fp8-recipe") else "--fp8-format"
        out.put("training.fp8", fp8_settings(args, recipe), said)
    optimizer = (args.value("optimizer") or "adam").lower()
    mapped = framework_names("megatron").get(optimizer)  # the registry's (state/optimizers.py)
    if mapped is None:
        out.unmapped("--optimizer", optimizer, "not mapped (Megatron's adam or sgd)")
    else:  # Megatron's adam is AdamW (decoupled weight decay); its sgd has momentum 0.9
        out.put("training.optimizer", mapped, "--optimizer")
    _attention(args, out)
    loss_fusion(args, out)


def _attention(args: _Args, out: Mapped) -> None:
    """--attention-backend (Megatron-LM's arguments.py: choices flash, fused, unfused, local,
    auto; `default=AttnBackend.auto`, so a script without the flag runs auto). auto lets
    Transformer Engine's DotProductAttention pick its fastest backend, FlashAttention or cuDNN's
    fused attention (neither stores the scores): flash. unfused (TE's) and local (Megatron's own
    DotProductAttention, only with the local spec) store the softmax: eager."""
    backend = args.value("attention-backend")
    if backend is not None:
        text("--attention-backend", backend, tuple(ATTENTION))
    if backend is None and args.has("deepspeed"):
        _deepspeed_attention(args, out)
        return
    impl = args.by_name.get("transformer-impl")
    if backend in (None, "auto") and impl is not None and impl.values == ("local",):
        args.used.add("transformer-impl")  # the local spec: Megatron's DotProductAttention
        out.put("training.attention_kernel", "eager", "--transformer-impl")
        return
    out.put("training.attention_kernel", ATTENTION[backend or "auto"], "--attention-backend")
    if backend is None:
        why = "absent: Megatron-LM's default, auto (Transformer Engine picks flash or fused)"
        out.note("--attention-backend", f"{why}: training.attention_kernel: flash")


# Megatron-DeepSpeed's FlashAttention switches (its megatron/arguments.py; the older
# --use-flash-attn among them); without one it runs its classic attention, the scores kept
_DS_FLASH = ("use-flash-attn", "use-flash-attn-v1", "use-flash-attn-v2", "use-flash-attn-triton")


def _deepspeed_attention(args: _Args, out: Mapped) -> None:
    """A Megatron-DeepSpeed script (`--deepspeed`): it has no --attention-backend, and its
    attention is the classic one (eager) unless a --use-flash-attn* flag is given."""
    given = [name for name in _DS_FLASH if args.has(name)]
    kernel = "flash" if given else "eager"
    out.put("training.attention_kernel", kernel, f"--{given[0]}" if given else "--deepspeed")
    if not given:
        why = (
            "a Megatron-DeepSpeed script without --use-flash-attn-v2 (or -v1, -triton): its "
            "classic attention, the scores kept: training.attention_kernel: eager"
        )
        out.note("--deepspeed", why)


def _recompute(args: _Args, out: Mapped) -> None:
    granularity = args.value("recompute-granularity")
    if granularity is not None:
        out.put(
            "training.recompute",
            text("--recompute-granularity", granularity, ("full", "selective")),
            "--recompute-granularity",
        )
    elif args.has("recompute-activations"):  # Megatron's older spelling of selective
        out.put("training.recompute", "selective", "--recompute-activations")
    method = args.value("recompute-method")
    count = args.value("recompute-num-layers")
    if method is not None or count is not None:
        said = " ".join(x for x in (method, count and f"{count} layers") if x)
        out.unmapped(
            "--recompute-method",
            said,
            "which layers recompute: tiersim recomputes every layer the granularity names",
        )
    modules = args.by_name.get("recompute-modules")
    if modules is not None:
        args.used.add("recompute-modules")
        for m in modules.values:
            text("--recompute-modules", m, RECOMPUTE_MODULES)
        out.put("training.recompute_modules", list(modules.values), "--recompute-modules")


_MODEL_FLAGS = ("num-layers", "hidden-size", "num-attention-heads", "ffn-hidden-size",
                "num-query-groups", "group-query-attention", "kv-channels", "vocab-size",
                "max-position-embeddings", "swiglu", "untie-embeddings-and-output-weights",
                "normalization", "position-embedding-type", "disable-bias-linear",
                "add-qkv-bias", "attention-dropout", "hidden-dropout", "num-experts",
                "moe-router-topk", "moe-ffn-hidden-size", "vocab-file",
                "tokenizer-type")  # fmt: skip


def _superseded(args: _Args, out: Mapped) -> None:
    for name in _MODEL_FLAGS:
        if name in args.by_name:
            args.used.add(name)
            given = " ".join(args.by_name[name].values) or "given"
            out.note(f"--{name}", f"{given}: the model is --hf-config's")


def _model(args: _Args, out: Mapped) -> None:
    layers, hidden = args.integer("num-layers"), args.integer("hidden-size")
    heads = args.integer("num-attention-heads")
    if layers is None or hidden is None or heads is None:
        return  # no model here: the assembly asks for one
    swiglu = args.has("swiglu")
    default_ffn = int(4 * hidden * 2 / 3 / 64) * 64 if swiglu else 4 * hidden
    model: dict[str, Any] = {"family": "gpt", "layers": layers, "hidden": hidden, "heads": heads,
                             "ffn_hidden": args.integer("ffn-hidden-size") or default_ffn,
                             "gated_mlp": swiglu}  # fmt: skip
    groups = args.integer("num-query-groups")
    if args.has("group-query-attention") and groups is not None:
        model["kv_heads"] = groups
    head_dim = args.integer("kv-channels")
    if head_dim is not None and head_dim * heads != hidden:
        model["head_dim"] = head_dim
    try:
        model["vocab"] = tokenizer_vocab(args)  # padded as the framework pads it, at resolve
    except ValueProblem as exc:  # refused at assembly unless --set model.vocab gives it
        out.facts["vocab_unknown"] = (out.source, exc)
    positions = args.integer("max-position-embeddings")
    kind = args.value("position-embedding-type") or "learned_absolute"
    model["position"] = {"learned_absolute": "learned", "rope": "rope", "none": "none"}.get(kind)
    if model["position"] is None:
        out.unmapped("--position-embedding-type", kind, "taken as rope (no table of parameters)")
        model["position"] = "rope"
    if positions is not None:
        model["max_positions"] = positions
    model["tied_embeddings"] = not args.has("untie-embeddings-and-output-weights")
    norm = (args.value("normalization") or "LayerNorm").lower()
    model["norm"] = text("--normalization", norm, ("layernorm", "rmsnorm"))
    bias = not args.has("disable-bias-linear")
    model.update(qkv_bias=bias or args.has("add-qkv-bias"), attn_out_bias=bias, mlp_bias=bias)
    for flag, key in (
        ("attention-dropout", "attention_dropout"),
        ("hidden-dropout", "hidden_dropout"),
    ):
        raw = args.value(flag)
        if raw is not None:
            model[key] = number(f"--{flag}", raw)
    experts = args.integer("num-experts")
    if experts is not None:
        model["experts"] = experts
        model["experts_per_token"] = args.integer("moe-router-topk") or 2
        ffn = args.integer("moe-ffn-hidden-size")
        if ffn is not None:
            model["expert_ffn_hidden"] = ffn
    for key, value in model.items():
        out.put(f"model.{key}", value, "(model flags)")
