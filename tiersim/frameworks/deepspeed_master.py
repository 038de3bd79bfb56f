"""DeepSpeed's low-precision master weights: `fp16.fp16_master_weights_and_grads`,
`bf16.bf16_master_weights_and_grads` and `bf16.bf16_optimizer_states`, with the checks
DeepSpeed makes of them (review 2026-12-07-i: noted, the master counted fp32).

Read in DeepSpeed 0.19.8 (PyPI), the same in stage_1_and_2.py at 02aa38c3 (docs/deepspeed-
version.md's `latest`):

- precision_config.py: `fp16_master_weights_and_grads` "Maintain master weights in optimizer
  state as fp16 instead of fp32 (valid with DeepSpeedCPUAdam only)"; the ZeRO optimizer's
  `master_weights_and_grads_dtype` (base_optimizer.py `_configure_master_weights`) is then fp16
  for the master partition and the gradient partition the optimizer steps on the host;
- config.py `_do_error_check` asserts each of the three "only supported with ZeRO Stage 1, 2,
  or 3", and bf16_optimizer_states "requires bf16_master_weights_and_grads to be enabled";
- stage_1_and_2.py / stage3.py `_enforce_cpu_offload` assert, for an fp16 master (and a bf16
  one whose optimizer states stay fp32), "Master weights feature requires ZeRO-N Offload with
  DeepSpeedCPUAdam": the optimizer offloaded and DeepSpeed's CPU Adam (engine.py
  `_configure_basic_optimizer` builds it for type Adam / AdamW under the offload unless
  `torch_adam`); offloaded bf16 optimizer states need that Adam built with
  `fp32_optimizer_states: false` (base_optimizer.py asserts).
"""

from __future__ import annotations

from typing import Any

from tiersim.frameworks.mapping import Mapped
from tiersim.frameworks.values import ValueProblem, boolean
from tiersim.state.optimizers import framework_names, optimizer

KEYS = ("fp16_master_weights_and_grads", "bf16_master_weights_and_grads", "bf16_optimizer_states")
# DeepSpeed's optimizer types, the registry's (state/optimizers.py): those it steps with
# DeepSpeedCPUAdam under the offload (engine.py) are the ones rated as that CPU Adam
_TYPES = {ds.lower(): ours for ds, ours in framework_names("deepspeed").items()}


def low_precision_master(out: Mapped, cfg: dict[str, Any]) -> None:
    """The master (and bf16 optimizer states) the precision sections' flags give, refused
    where DeepSpeed refuses them; `out.facts["low_master"]`: {config key: value}."""
    given = out.facts.pop("low_master", {})
    on = {where: boolean(where, value) for where, value in given.items()}
    for where in (w for w, v in on.items() if not v):
        out.unmapped(where, False, "DeepSpeed's default: the master in fp32")
    master = [w for w, v in on.items() if v and w.endswith("master_weights_and_grads")]
    states = [w for w, v in on.items() if v and w.endswith("bf16_optimizer_states")]
    if states and not any("bf16_master" in w for w in master):
        why = (
            "true (DeepSpeed asserts it 'requires bf16_master_weights_and_grads to be enabled'; "
            "expected bf16.bf16_master_weights_and_grads: true beside it, or false)"
        )
        raise ValueProblem(states[0], why)
    if not master:
        return
    where = master[0]
    stage = out.values.get("parallel.zero_stage", 0)
    if stage == 0:
        said = "is only supported with ZeRO Stage 1, 2, or 3"
        why = (
            f"true at ZeRO stage 0 (DeepSpeed asserts it '{said}'; expected "
            "zero_optimization.stage 1, 2 or 3, or false)"
        )
        raise ValueProblem(where, why)
    offloaded = out.values.get("placement.optimizer_compute") == "cpu"
    if not offloaded and (where.startswith("fp16") or not states):
        why = (
            f"true without zero_optimization.offload_optimizer (DeepSpeed asserts 'Master "
            f"weights feature requires ZeRO-{stage} Offload with DeepSpeedCPUAdam'; expected "
            "zero_optimization.offload_optimizer (device cpu or nvme) beside it, or false)"
        )
        raise ValueProblem(where, why)
    if offloaded:
        _cpu_adam(where, cfg.get("optimizer"), bool(states))
        out.put("training.offload.boundary_gradients", "stored", where)  # the host's partition
    dtype = "fp16" if where.startswith("fp16") else "bf16"
    out.put("training.precision.master", dtype, where)
    if states:
        out.put("training.precision.optimizer", "bf16", states[0])


def _cpu_adam(where: str, section: Any, bf16_states: bool) -> None:
    """The offloaded optimizer must be DeepSpeedCPUAdam (a client optimizer, no `optimizer`
    section, cannot be told: taken as it)."""
    if not isinstance(section, dict):
        return
    name = str(section.get("type", "Adam"))
    params = section.get("params") if isinstance(section.get("params"), dict) else {}
    ours = _TYPES.get(name.lower())
    runs = (
        "torch's Adam (params.torch_adam)"
        if params.get("torch_adam") is True
        else None
        if ours is not None and optimizer(ours).cpu_rated
        else f"optimizer.type {name}"
    )
    if runs is not None:
        why = (
            f"true with {runs} (DeepSpeed asserts the master feature runs 'with "
            "DeepSpeedCPUAdam': optimizer.type Adam or AdamW under the offload)"
        )
        raise ValueProblem(where, why)
    if bf16_states and params.get("fp32_optimizer_states", True) is not False:
        why = (
            "true under the optimizer offload without optimizer.params.fp32_optimizer_states: "
            "false (DeepSpeed asserts DeepSpeedCPUAdam be 'constructed with "
            "fp32_optimizer_states=False')"
        )
        raise ValueProblem(where.replace("bf16_master_weights_and_grads", KEYS[2]), why)
