"""A measurement's JSON form, and the dimensions `--set` changed from the named model."""

from __future__ import annotations

from typing import Any

from tiersim.groundtruth.measure import CLASSES, Measurement, model_dims


def overridden(m: Measurement) -> dict[str, tuple[Any, Any]]:
    """Each dimension `--set` changed: (the named model's value or None, the measured value)."""
    measured = model_dims(m.scenario.model)
    keys = list(measured) + [k for k in m.named_model if k not in measured]
    return {
        k: (m.named_model.get(k), measured.get(k))
        for k in keys
        if m.named_model.get(k) != measured.get(k)
    }


def report(m: Measurement) -> dict[str, Any]:
    """The JSON form: `classes: {<class>: {measured_bytes, predicted_bytes}}` and the details."""
    s, req = m.scenario, m.request
    return {
        "model": {**s.model.model_dump(exclude_none=True), "parameters": m.parameters},
        "overridden_dimensions": {  # --set model.KEY=VALUE: the model measured is not the named
            k: {"named": old, "measured": new} for k, (old, new) in overridden(m).items()
        },
        "configuration": {
            "seq_len": s.seq_len,
            "micro_batch_size": s.training.micro_batch_size,
            "optimizer": req.optimizer,
            "dtype": req.dtype,
            "attention": req.attention,
            "implementation": req.implementation,
            "family": m.family,  # the transformers class run (huggingface)
            "device": m.device,
            "device_name": m.device_name,
            "torch_version": m.torch_version,
        },
        "classes": {
            cls: {"measured_bytes": m.measured[cls], "predicted_bytes": m.predicted[cls]}
            for cls in CLASSES
        },
        "activations": {
            "per_layer_bytes": m.activations_per_layer,
            "outside_layers_bytes": m.activations_outside_layers,
            "predicted_per_layer_bytes": m.predicted_per_layer,  # huggingface, for this device
            "predicted_outside_layers_bytes": m.predicted_outside,
            "activation_factor": m.activation_factor(),  # measured / uncalibrated formula
        },
        "optimizer_step_counters_bytes": m.optimizer_step_counters_bytes,
        "peak_allocated_bytes": m.peak_allocated_bytes,
        "predicted_peak_bytes": m.predicted_peak_bytes,
    }
