"""Checks across sections of a validated scenario: tier names that exist, parallel sizes that
divide the model, a sequence within learned positions, a GPU that can run the weights' precision,
one link per pair of tiers. Each returns every problem it finds (exit 2), not the first only."""

from __future__ import annotations

from tiersim.config.deepspeed import (
    deepspeed_key_problems,
    muon_reduce_scatter_problems,
    stage0_offload_problems,
)
from tiersim.config.distributed_optimizer import distributed_optimizer_problems
from tiersim.config.expert_overlap_checks import expert_overlap_problems
from tiersim.config.family_checks import family_problems
from tiersim.config.fields import plain_fields
from tiersim.config.kernel_checks import compile_problems, fp8_problems, sustained_problems
from tiersim.config.kv_head_split import kv_head_problems
from tiersim.config.layout_checks import mesh_problems
from tiersim.config.loss_chunks import loss_chunk_problems
from tiersim.config.precision_checks import precision_problems
from tiersim.config.schema import Scenario
from tiersim.config.tier_names import defaulted_tier, no_such_tier
from tiersim.config.variants import MIXTRAL_VARIANTS, MLA_VARIANTS, given_variants
from tiersim.config.zeropp import zeropp_problems
from tiersim.core.errors import Problem
from tiersim.state.classes import PLACED
from tiersim.state.optimizers import optimizer


def _tier_problems(s: Scenario) -> list[Problem]:
    tiers = s.hardware.tiers
    problems = []

    def check(path: str, tier: str, written: bool = True) -> None:
        if tier not in tiers:
            why = no_such_tier(tier, tiers) if written else defaulted_tier(path, tier, tiers)
            problems.append(Problem(path, why, "E-TIER-UNKNOWN"))

    placement = plain_fields(s.placement)  # flat but for its experts' (tests/test_fixed_once.py)
    for cls in PLACED:
        check(f"placement.{cls}", placement[cls], cls in s.placement.model_fields_set)
    for cls, tier in plain_fields(placement["experts"]).items():
        if tier is not None:
            check(f"placement.experts.{cls}", tier)
    check("hardware.gpu.memory", s.hardware.gpu.memory, "memory" in s.hardware.gpu.model_fields_set)
    check("hardware.cpu.memory", s.hardware.cpu.memory, "memory" in s.hardware.cpu.model_fields_set)
    for name, link in s.hardware.links.items():
        for i, tier in enumerate(link.between):
            check(f"hardware.links.{name}.between.{i}", tier)
        if link.between[0] == link.between[1]:
            why = (
                f"joins a tier to itself ({link.between[0]}; expected two tiers, e.g. [hbm, dram])"
            )
            problems.append(Problem(f"hardware.links.{name}.between", why, "E-CONFLICT"))
    if s.checkpoint.target == s.hardware.gpu.memory:  # wrong whether simulated now or not
        what = (
            f"'{s.checkpoint.target}' is the GPU's own memory, lost with the failure a "
            "checkpoint is for (expected host memory or storage, e.g. 'nvme')"
        )
        problems.append(Problem("checkpoint.target", what, "E-CONFLICT"))
    if s.checkpoint_simulated:  # the default target (nvme) need not exist if none is written
        written = s.checkpoint.model_fields_set
        check("checkpoint.target", s.checkpoint.target, "target" in written)
        if s.checkpoint.mode == "async":
            check("checkpoint.staging", s.checkpoint.staging, "staging" in written)
    for tier, _ in s.budget.tiers.items():
        check(f"budget.{tier}", tier)
        if tier in tiers and tiers[tier].endurance is None:
            problems.append(
                Problem(
                    f"budget.{tier}",
                    f"tier '{tier}' has no endurance (give "
                    f"hardware.tiers.{tier}.endurance, or budget only flash tiers)",
                    "E-WEAR",
                )
            )
    return problems


def _endurance_problems(s: Scenario) -> list[Problem]:
    """Only a tier whose writes wear it (config/tier_kinds.py) takes an endurance."""
    return [
        Problem(
            f"hardware.tiers.{name}.endurance",
            f"a tier of kind {tier.kind} does not wear (expected endurance only on a tier "
            "whose writes wear it, kind flash; or kind: flash for this tier)",
            "E-WEAR",
        )
        for name, tier in s.hardware.tiers.items()
        if tier.endurance is not None and not tier.behaviour.wears
    ]


def _model_problems(s: Scenario) -> list[Problem]:
    """What a generic model (a parameter count, no shapes) cannot give."""
    needs = optimizer(s.training.optimizer).shapes
    if s.model.parameters is None or not needs:
        return []
    what = (
        f"{s.training.optimizer} {needs}, and a generic model "
        "('parameters') has no matrix shapes (expected the transformer's dimensions, a "
        "'preset' or an 'hf_config'; or another optimizer)"
    )
    return [Problem("training.optimizer", what, "E-CONFLICT")]


def _position_problems(s: Scenario) -> list[Problem]:
    """Learned position embeddings are a table of max_positions rows: no position beyond it
    (rotary positions are computed, and run past max_positions)."""
    m = s.model
    if m.parameters is not None or m.position != "learned" or m.max_positions is None:
        return []
    if s.seq_len <= m.max_positions:
        return []
    what = (
        f"{s.seq_len} exceeds the model's {m.max_positions} learned positions "
        f"(expected at most model.max_positions, {m.max_positions})"
    )
    return [Problem("training.seq_len", what, "E-CONFLICT")]


def _link_pair_problems(s: Scenario) -> list[Problem]:
    """One link per pair of tiers: routes pick links by the tiers they join."""
    seen: dict[frozenset, str] = {}
    problems = []
    for name, link in s.hardware.links.items():
        pair = frozenset(link.between)
        if pair in seen:
            problems.append(
                Problem(
                    f"hardware.links.{name}",
                    f"joins the same tiers as '{seen[pair]}' "
                    "(give one link per pair of tiers, with their combined bandwidth)",
                    "E-CONFLICT",
                )
            )
        seen.setdefault(pair, name)
    return problems


def _implementation_problems(s: Scenario) -> list[Problem]:
    """The huggingface accounting measured GPT-2- and Llama-style layers and Mixtral's MoE."""
    variants = [k for k in given_variants(s.model) if not k.startswith("sliding_window")]
    if s.training.implementation == "torchtitan":
        return _titan_problems(s, variants)
    variants = [k for k in variants if k not in (*MIXTRAL_VARIANTS, *MLA_VARIANTS)]
    if s.model.shared_expert_gate or s.model.expert_groups:  # Qwen2-MoE's, DeepSeek-V3's
        variants = [k for k in variants if not k.startswith(("shared_expert", "expert_groups"))]
    if s.model.expert_groups:  # DeepSeek-V3's first_k_dense_replace
        variants = [k for k in variants if k != "first_dense_layers"]
    if s.model.experts is not None and s.model.norm == "layernorm":
        variants.append("experts with norm: layernorm")
    if s.training.implementation != "huggingface" or not variants:
        return []
    what = (
        f"huggingface activation accounting knows GPT-2- and Llama-style layers, DeepSeek-V3's "
        f"latent attention and the mixture-of-experts of Mixtral, Qwen2-MoE and DeepSeek-V3 "
        f"(expert_groups) only, and the model gives "
        f"{', '.join(variants)} (expected implementation: megatron for other mixture-of-experts, "
        "q/k norms or post-norms)"
    )
    return [Problem("training.implementation", what, "E-CONFLICT")]


def _titan_problems(s: Scenario, variants: list[str]) -> list[Problem]:
    """torchtitan's accounting is its Llama model's (state/activations_titan.py)."""
    if s.model.norm == "layernorm" and s.model.parameters is None:
        variants.append("norm: layernorm")
    if s.training.attention_kernel == "eager":
        variants.append("attention_kernel: eager (torchtitan runs sdpa or flex)")
    if not variants:
        return []
    what = (
        f"torchtitan activation accounting knows its Llama model only, and the scenario gives "
        f"{', '.join(variants)} (expected implementation: megatron or huggingface for them)"
    )
    return [Problem("training.implementation", what, "E-CONFLICT")]


def _kernel_problems(s: Scenario) -> list[Problem]:
    """The unfused kernels' bytes are counted for Megatron-LM v1's GPT-2 layer only (its own
    modelling code, dense attention computed op by op)."""
    m, t = s.model, s.training
    other = [
        what
        for what, given in (
            ("implementation huggingface", t.implementation == "huggingface"),
            (
                f"attention_kernel {t.attention_kernel} (one fused kernel)",
                t.attention_kernel in ("sdpa", "flash"),
            ),
            ("a gated MLP", m.gated_mlp),
            ("RMSNorm", m.norm == "rmsnorm"),
            ("mixture-of-experts", m.experts is not None),
            ("latent attention", m.kv_lora_rank is not None),
            ("no dimensions (a parameter count)", m.hidden is None),
        )
        if given
    ]
    if s.training.fused_kernels or not other:
        return []
    what = (
        f"false: the unfused kernels are those of Megatron-LM v1's GPT-2 layer (LayerNorm, "
        f"a GeLU MLP, dense attention op by op), and the scenario has {', '.join(other)} "
        "(expected true)"
    )
    return [Problem("training.fused_kernels", what, "E-CONFLICT")]


def _framework_problems(s: Scenario) -> list[Problem]:
    """Megatron-LM's own offload (--optimizer-cpu-offload) is not modelled: with `framework:
    megatron` nothing may leave the GPU, rather than run as another engine's under its name."""
    if s.training.framework != "megatron":
        return []
    instead = (
        "training.framework: megatron models Megatron-LM without offload; its "
        "--optimizer-cpu-offload is not modelled (expected {want}, or framework deepspeed "
        "or fsdp, or no framework for tiersim's generic offload engine)"
    )
    gpu, placement = s.hardware.gpu.memory, s.placement
    problems = [
        Problem(f"placement.{cls}", f"'{tier}': " + instead.format(want=f"'{gpu}'"), "E-PLACEMENT")
        for cls in PLACED
        if (tier := getattr(placement, cls)) != gpu
    ]
    problems += [
        Problem(
            f"placement.experts.{cls}",
            f"'{tier}': " + instead.format(want=f"'{gpu}'"),
            "E-PLACEMENT",
        )
        for cls, tier in plain_fields(placement.experts).items()
        if tier is not None and tier != gpu
    ]
    if placement.optimizer_compute != "gpu":
        what = f"'{placement.optimizer_compute}': " + instead.format(want="'gpu'")
        problems.append(Problem("placement.optimizer_compute", what, "E-PLACEMENT"))
    for key, value in plain_fields(s.training.offload).items():
        if value is not None:
            problems.append(_megatron_offload_key(key, value, instead))
    return problems


# the keys of training.offload that choose how weights are fetched, not where state lives
# (what each sets, the frameworks whose engines read it)
FETCH_KEYS = {
    "fetch": ("the unit sharded or offloaded weights are fetched in", "fsdp or deepspeed"),
    "prefetch_bucket_size": ("DeepSpeed ZeRO-3's prefetch bucket", "deepspeed"),
    "max_live_parameters": ("DeepSpeed ZeRO-3's bound on parameters gathered at once", "deepspeed"),
}


def _megatron_offload_key(key: str, value: object, instead: str) -> Problem:
    """A `training.offload` key under megatron, in the words of what it sets: a fetch key
    speaks of fetching (review o, 12), the others of the offload engines they describe."""
    path = f"training.offload.{key}"
    if key not in FETCH_KEYS:
        want = "the key left out: it describes DeepSpeed's and FSDP2's offload engines"
        return Problem(path, instead.format(want=want), "E-PLACEMENT")
    given = f"'{value}'" if isinstance(value, str) else f"{value:,}"
    what, readers = FETCH_KEYS[key]
    why = (
        f"{given}: sets {what}, which training.framework: megatron does not read "
        "(Megatron-LM's weights are whole on each GPU or, under parallel.zero_stage 3, gathered "
        "a layer at a time; its --optimizer-cpu-offload is not modelled); expected the key "
        f"left out, or framework {readers}, which reads it"
    )
    return Problem(path, why, "E-PLACEMENT")


def _deepspeed_problems(s: Scenario) -> list[Problem]:
    """DeepSpeed's CPU optimizer (offload_optimizer) copies each reduced gradient into host
    memory, where its fp32 accumulation buffer lives (ZeRO-Infinity swaps them on to NVMe with
    the optimizer state): no DeepSpeed mode keeps them on a GPU-side tier (its HBM, an HBF)
    for it, so that placement would run as no engine does, without the host copies."""
    placement, tiers = s.placement, s.hardware.tiers
    if s.training.framework != "deepspeed" or placement.optimizer_compute != "cpu":
        return []
    host = s.hardware.cpu.memory
    links = [set(link.between) for link in s.hardware.links.values()]
    behind_host = {
        n for n, t in tiers.items() if t.behaviour.swapped_in_blocks and {n, host} in links
    }
    allowed = {host} | behind_host  # host memory, or drives on the host (not a GPU's HBF)
    why = (
        "DeepSpeed's CPU optimizer takes every gradient into host memory (its offload_optimizer "
        f"accumulates them there); expected '{host}' (or an NVMe tier, where ZeRO-Infinity "
        "swaps them), or placement.optimizer_compute: gpu"
    )
    homes = {"placement.gradients": placement.gradients}
    experts = plain_fields(placement.experts).get("gradients")
    if experts is not None:
        homes["placement.experts.gradients"] = experts
    return [
        Problem(path, f"'{tier}': {why}", "E-PLACEMENT")
        for path, tier in homes.items()
        if tier in tiers and tier not in allowed
    ]


# the recompute modules tiersim models (state/activations.MODULE_ITEMS, and core_attn)
MODELLED_MODULES = ("core_attn", "mlp", "moe", "layernorm", "mla_up_proj")


def _mtp_problems(s: Scenario) -> list[Problem]:
    """MTP modules are trained by Megatron-LM's DeepSeek-V3 recipe; transformers' model code
    does not run them."""
    if not s.model.mtp_layers or s.training.implementation == "megatron":
        return []
    why = (
        f"is {s.model.mtp_layers}, but training.implementation {s.training.implementation} does "
        "not run multi-token-prediction modules (expected implementation: megatron)"
    )
    return [Problem("model.mtp_layers", why, "E-CONFLICT")]


def _recompute_module_problems(s: Scenario) -> list[Problem]:
    """`training.recompute_modules` is Megatron-Core's --recompute-modules: it refines
    selective recompute of Megatron-LM's layer; four of its modules are modelled."""
    modules, tr = s.training.recompute_modules, s.training
    if modules is None:
        return []
    path = "training.recompute_modules"
    if tr.recompute != "selective":
        why = f"is set, but training.recompute is {tr.recompute} (expected recompute: selective)"
        return [Problem(path, why, "E-CONFLICT")]
    if tr.implementation != "megatron":
        why = "names Megatron-Core's modules (expected training.implementation: megatron)"
        return [Problem(path, why, "E-CONFLICT")]
    if "mla_up_proj" in modules and s.model.kv_lora_rank is None:
        why = "lists mla_up_proj, but the model has no latent attention (model.kv_lora_rank)"
        return [Problem(path, why, "E-CONFLICT")]
    unmodelled = [m for m in modules if m not in MODELLED_MODULES]
    if unmodelled:
        why = (
            f"lists {', '.join(unmodelled)}, not modelled yet (expected some of "
            f"{', '.join(MODELLED_MODULES)})"
        )
        return [Problem(path, why, "E-CONFLICT")]
    return []


def _recompute_every_problems(s: Scenario) -> list[Problem]:
    """`recompute_every` says which layers full recompute checkpoints (state/layer_sac.py)."""
    every, recompute = s.training.recompute_every, s.training.recompute
    if every is None or recompute == "full":
        return []
    why = f"is set, but training.recompute is {recompute} (expected recompute: full)"
    return [Problem("training.recompute_every", why, "E-CONFLICT")]


def _selective_op_problems(s: Scenario) -> list[Problem]:
    """`selective_op` is torchtitan's op-level policy over torchtitan's Llama block: the ops it
    saves are that code's (state/op_recompute.py)."""
    if s.training.recompute != "selective_op":
        return []
    if s.training.implementation != "torchtitan" or s.model.parameters is not None:
        why = (
            "selective_op is torchtitan's op-level policy over its Llama layer (expected "
            "training.implementation: torchtitan and a model given by its dimensions)"
        )
        return [Problem("training.recompute", why, "E-CONFLICT")]
    return []


def consistency_problems(s: Scenario) -> list[Problem]:
    return (
        _tier_problems(s)
        + _endurance_problems(s)
        + mesh_problems(s)
        + kv_head_problems(s)
        + _recompute_module_problems(s)
        + _selective_op_problems(s)
        + _recompute_every_problems(s)
        + _mtp_problems(s)
        + precision_problems(s)
        + fp8_problems(s)
        + sustained_problems(s)
        + compile_problems(s)
        + _model_problems(s)
        + _implementation_problems(s)
        + family_problems(s)
        + loss_chunk_problems(s)
        + _kernel_problems(s)
        + _position_problems(s)
        + _link_pair_problems(s)
        + _framework_problems(s)
        + _deepspeed_problems(s)
        + deepspeed_key_problems(s)
        + muon_reduce_scatter_problems(s)
        + stage0_offload_problems(s)
        + zeropp_problems(s)
        + distributed_optimizer_problems(s)
        + expert_overlap_problems(s)
    )


# --- entry points ------------------------------------------------------------------------------
