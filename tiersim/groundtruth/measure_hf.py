"""The transformers side of `tiersim measure` (`--implementation huggingface`) and `--fsdp N`:
the prediction for the device measured on, and the runs (tiersim.groundtruth.hfmodels, fsdp2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tiersim.config.schema import Scenario
from tiersim.groundtruth.measure_request import (
    Request,
    import_torch,
    invalid,
    model_dims,
    prediction_scenario,
)
from tiersim.state.activations import Accounting, accounting_for, layer_bytes, outside_items
from tiersim.state.model import Transformer, build_model
from tiersim.state.optimizers import ADAMW, fsdp2_stepped
from tiersim.state.optimizers import optimizer as optimizer_named


def _hf_accounting(s: Scenario, device: str) -> tuple[Transformer, Accounting]:
    model = build_model(s.model)
    assert isinstance(model, Transformer)
    return model, accounting_for(s, device)


def _hf_prediction(s: Scenario, device: str) -> dict[str, int]:
    """Per layer and outside, for the device measured on (the inventory predicts for a GPU)."""
    m, acc = _hf_accounting(s, device)
    seq, mbs, rc = s.seq_len, s.training.micro_batch_size, s.training.recompute
    return {
        "per_layer_predicted": round(layer_bytes(m, seq, mbs, acc, recompute=rc)),
        # every layer's own: DeepSeek's first layers are dense, Qwen's mlp_only_layers too
        "layers_predicted": [
            round(layer_bytes(m, seq, mbs, acc, recompute=rc, index=i)) for i in range(m.layers)
        ],
        "outside_predicted": round(sum(i.nbytes for i in outside_items(m, seq, mbs, acc))),
    }


def train_and_measure_hf(s: Scenario, req: Request, device: str) -> dict[str, Any]:
    try:
        from tiersim.groundtruth import hfmodels
    except ImportError:
        raise invalid(
            "implementation",
            "transformers is not installed: install the measure extra, "
            "pip install 'tiersim[measure]'",
        ) from None
    m, acc = _hf_accounting(s, device)
    try:
        family = hfmodels.family_of(m, s.model.family)
    except ValueError as exc:
        raise invalid("model", f"{exc} (or measure tiersim's own modules)") from None
    got = hfmodels.run(m, family, acc, req, s.seq_len, device)
    return {
        **got,
        "family": family,
        **_hf_prediction(s, device),
        "predicted_step_peak": step_peak_prediction(s, device),
    }


def step_peak_prediction(s: Scenario, device: str) -> int:
    """The peak of tiersim's memory timeline of the measured step for this device (allocated
    bytes: a GPU's context and NCCL lie outside what PyTorch reports)."""
    from tiersim.groundtruth.step_timeline import predicted_timeline

    return predicted_timeline(s, device).peak_allocated_bytes


def _silent(stage: str) -> None:
    """Where no one is told of the stages."""


def ranks_stage(world: int, what: str, steps: str) -> str:
    """The stage the ranks train in, as the command names it (`told`)."""
    return f"training {what} under FSDP2 on {world} CPU ranks (gloo processes; {steps})"


def measure_fsdp(req: Request, world: int, told: Callable[[str], None] = _silent) -> dict[str, Any]:
    """FSDP2 on `world` CPU ranks: each rank's bytes, measured and predicted (state/fsdp.py);
    with transformers' model (huggingface), rank 0's step peak beside the timeline's. `told`
    each stage as it starts, once the request is found valid (this process says them: the
    ranks are its children, silent, and would write over one another)."""
    low = 1 if req.implementation == "huggingface" else 2
    if not low <= world <= 16:
        raise invalid("--fsdp", f"{world} ranks (expected {low} to 16 processes on this host)")
    if req.implementation == "huggingface":
        # torch.optim.Muon steps FSDP2's DTensors (state/muon_sharded.py); 8-bit AdamW is
        # torchao's on them, in bf16 on each rank's local shards (docs/muon-fsdp.md)
        stepped = fsdp2_stepped()  # measured under FSDP2 (tests/test_fsdp2_step.py)
        if req.optimizer not in stepped:
            expected = " or ".join(stepped)
            raise invalid("optimizer", f"{req.optimizer!r} with --fsdp (expected {expected})")
        return _fsdp_step(req, world, told)
    if not optimizer_named(req.optimizer).adamw_state:
        # groundtruth/fsdp2.py steps torch's AdamW; Muon and torchao's 8-bit AdamW step
        # transformers' model only
        huggingface = req.optimizer in fsdp2_stepped()
        also = f"; {req.optimizer} with --implementation huggingface" if huggingface else ""
        expected = f"expected {' or '.join(fsdp2_stepped(adamw_state=True))}{also}"
        raise invalid("optimizer", f"{req.optimizer!r} with --fsdp ({expected})")
    scenario = prediction_scenario(req)
    told("importing PyTorch")
    import_torch()
    from tiersim.groundtruth import fsdp2

    model = build_model(scenario.model)
    assert isinstance(model, Transformer)
    seq, mbs = scenario.seq_len, scenario.training.micro_batch_size
    told(ranks_stage(world, "the model", "one step"))
    got = fsdp2.measure_fsdp(model, world, req.dtype, seq, mbs)
    config = {"seq_len": seq, "micro_batch_size": mbs, "dtype": req.dtype}
    config["optimizer"] = ADAMW.name  # what groundtruth/fsdp2.py steps
    return {"model": model_dims(scenario.model), "configuration": config, **got}


def _fsdp_step(req: Request, world: int, told: Callable[[str], None]) -> dict[str, Any]:
    """transformers' model under FSDP2 on `world` gloo ranks: rank 0's recorded step peak and
    the memory timeline's for the CPU (groundtruth/fsdp2_step.py, state/fsdp2_memory.py)."""
    scenario = prediction_scenario(req, fsdp=world)
    told("importing PyTorch and transformers")  # the timeline's import brings transformers
    import_torch()
    from tiersim.groundtruth.fsdp2_step import record_fsdp_steps
    from tiersim.groundtruth.step_timeline import predicted_timeline

    told(ranks_stage(world, "transformers' model", "a warm-up step, then the recorded one"))
    (measured,) = record_fsdp_steps([(scenario, req.dtype)], world)
    t = predicted_timeline(scenario)
    seq, mbs = scenario.seq_len, scenario.training.micro_batch_size
    config = {"seq_len": seq, "micro_batch_size": mbs, "dtype": req.dtype}
    config["optimizer"] = req.optimizer
    if req.recompute != "none":  # run as the scenario asks (measure --scenario)
        config["recompute"] = req.recompute
    peak = t.peak_event
    return {
        "model": model_dims(scenario.model),
        "configuration": config,
        "world_size": world,
        "step_peak": {
            "measured_bytes": measured.peak_bytes,
            "measured_phase": measured.peak_phase,
            "predicted_bytes": t.peak_allocated_bytes,
            "predicted_moment": peak.moment if peak else "start",
            "predicted_parts": t.peak_parts,
        },
    }
