"""Optimizers as objects, one registry: what each keeps per parameter tensor, what its update
costs, what temporaries its step allocates, which PyTorch optimizer `tiersim measure` builds for
it, and what the rest of tiersim asks of it (the flag a framework's config takes for it, which
`measure` paths step it, whether DeepSpeed runs it on whole matrices). Nothing else names an
optimizer (`training.optimizer` takes REGISTRY's names; tests/test_layout.py refuses a
comparison of one with a literal anywhere else): adding one is an entry in OPTIMIZERS, with a
class of its own (state/optimizer_base.py) where its state or step is not elementwise.

Sources, per optimizer:
- adam / adamw: exp_avg and exp_avg_sq (torch.optim.Adam/AdamW; Kingma and Ba 2015).
- sgd / sgd_momentum: none / a momentum buffer; lion: one momentum (Chen et al. 2023).
- adafactor: row and column statistics per matrix (Shazeer and Stern 2018).
- adamw8bit: bitsandbytes' block-wise 8-bit AdamW, torchao's on FSDP2 (state/adamw8bit.py).
- muon: torch.optim.Muon, AdamW on embeddings, head and vectors (state/muon.py).
Framework names: DeepSpeed's optimizer.type (engine.py 007cca6a `_configure_basic_optimizer`
lower-cases it; "muon" its MUON_OPTIMIZER, as its tests/unit/ops/muon/test_muon.py write it),
Megatron-LM's --optimizer (adam, which is AdamW, and sgd with momentum 0.9), torchtitan's
[optimizer] name (Adam, AdamW). Of tiersim this imports only the modules named here and their
leaves, so the scenario format can use the names.
"""

from __future__ import annotations

from tiersim.state.adamw8bit import AdamW8bit
from tiersim.state.muon import NS_STEPS, Muon, embedding_name, newton_schulz_flops, takes_muon
from tiersim.state.optimizer_base import AdamLike, Optimizer

__all__ = [
    "ADAMW",
    "DEFAULT",
    "IN_PYTORCH",
    "NAMES",
    "NS_STEPS",
    "OPTIMIZERS",
    "REGISTRY",
    "AdamLike",
    "AdamW8bit",
    "Muon",
    "Optimizer",
    "embedding_name",
    "framework_names",
    "fsdp2_stepped",
    "newton_schulz_flops",
    "optimizer",
    "takes_muon",
]

ADAMW = AdamLike(
    "adamw",
    2,
    13.0,
    "AdamW",
    foreach_list=True,
    cpu_rated=True,
    apex_distributed=True,
    adamw_state=True,
    fsdp2_step_order=0,
    fsdp2_title="AdamW",
    deepspeed_type="AdamW",
    megatron_optimizer="adam",
    torchtitan_name="AdamW",
)
OPTIMIZERS: tuple[Optimizer, ...] = (
    AdamLike(
        "adam",
        2,
        12.0,
        "Adam",
        foreach_list=True,
        cpu_rated=True,
        apex_distributed=True,
        adamw_state=True,
        fsdp2_step_order=1,
        fsdp2_title="Adam",
        deepspeed_type="Adam",
        megatron_optimizer="adam",
        megatron_runs_instead="AdamW (decoupled weight decay)",
        torchtitan_name="Adam",
    ),
    ADAMW,
    Optimizer("sgd", 0, 2.0, "SGD", deepspeed_type="SGD"),
    Optimizer("sgd_momentum", 1, 4.0, "SGD", (("momentum", 0.9),), megatron_optimizer="sgd"),
    Optimizer(
        "adafactor",
        None,
        12.0,
        "Adafactor",
        shapes="keeps row and column statistics per weight matrix",
    ),
    Optimizer("lion", 1, 8.0, None, deepspeed_type="Lion"),
    # bitsandbytes' refuses DTensors: torchao's steps them, eager
    AdamW8bit(
        "adamw8bit", 2, 13.0, None, fsdp2_step_order=3, fsdp2_title="torchao's AdamW8bit (eager)"
    ),
    Muon(
        "muon",
        1,
        4.0,
        "Muon",
        shapes="orthogonalises each weight matrix and keeps AdamW's moments for the rest",
        fsdp2_step_order=2,
        fsdp2_title="Muon and AdamW",
        deepspeed_type="muon",
        deepspeed_whole_matrices=True,
        rest=ADAMW,
    ),
)
REGISTRY: dict[str, Optimizer] = {o.name: o for o in OPTIMIZERS}
NAMES = tuple(REGISTRY)
DEFAULT = ADAMW.name  # `training.optimizer`'s and `measure --optimizer`'s
IN_PYTORCH = tuple(o.name for o in OPTIMIZERS if o.measurable)  # what measure builds


def optimizer(name: str) -> Optimizer:
    """The optimizer called `name`; an unknown name is our bug (the format checked it)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"no optimizer {name!r} (expected one of {', '.join(NAMES)})") from None


def fsdp2_stepped(adamw_state: bool = False) -> tuple[str, ...]:
    """The optimizers `measure --fsdp` steps on transformers' model, in the order its messages
    list them (`adamw_state`: only those whose state is AdamW's, which its per-rank bytes on
    tiersim's own modules measure with torch's AdamW)."""
    ones = [o for o in OPTIMIZERS if o.fsdp2_step_order is not None]
    ones = [o for o in ones if o.adamw_state or not adamw_state]
    return tuple(o.name for o in sorted(ones, key=lambda o: o.fsdp2_step_order or 0))


def framework_names(framework: str) -> dict[str, str]:
    """Each optimizer's name in `framework`'s config (deepspeed: optimizer.type; megatron:
    --optimizer, only where the flag runs this one; torchtitan: [optimizer] name) -> tiersim's,
    for the importers."""
    out: dict[str, str] = {}
    for o in OPTIMIZERS:
        theirs = {
            "deepspeed": o.deepspeed_type,
            "megatron": "" if o.megatron_runs_instead else o.megatron_optimizer,
            "torchtitan": o.torchtitan_name,
        }[framework]
        if theirs:
            out[theirs] = o.name
    return out
