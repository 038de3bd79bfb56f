"""The model preset `tiersim measure --calibrate` writes: the model's dimensions and the
measured activation factor, saying at which shape it was measured.

A model shrunk with `--set model.KEY=VALUE` (to fit in memory, as the memory guard suggests)
is not the model named. Where only its depth or vocabulary changed, the factor (a ratio of
per-layer bytes, which neither changes) holds for the named model: the preset has the named
model's dimensions and says what was measured. Where a layer's shape changed (hidden, heads,
MLP width, ...), the factor is that shape's: the preset has the measured dimensions and says
it is not the named model.
"""

from __future__ import annotations

import textwrap

import yaml

from tiersim.groundtruth.measure import Measurement, model_dims
from tiersim.groundtruth.measure_report import overridden

SHAPE_FREE = frozenset({"layers", "vocab"})  # per-layer activations do not depend on them


def carries_over(m: Measurement) -> bool:
    """Whether the factor measured holds for the named model: only depth or vocabulary changed."""
    return set(overridden(m)) <= SHAPE_FREE


def named(m: Measurement) -> str:
    model = m.request.model
    return str(model.get("preset") or model.get("hf_config") or "the model given")


def shrink_lines(m: Measurement, calibrating: bool = True) -> list[str]:
    """What was measured instead of the named model, and what the preset holds (`calibrating`:
    one is written, else what the figures shown are); [] if nothing was overridden."""
    changed = overridden(m)
    if not changed:
        return []
    name = named(m)
    sets = ", ".join(
        f"model.{k}={new} ({name}: {'not set' if old is None else old})"
        for k, (old, new) in changed.items()
    )
    if not calibrating:
        return [_measured_instead(name, sets, carries_over(m))]
    if carries_over(m):
        return [
            f"measured with {sets}; the calibrated preset has {name}'s own dimensions: the "
            "activation factor is a ratio of per-layer bytes, which depth and vocabulary do "
            "not change"
        ]
    return [
        f"measured with {sets}: the calibrated preset is that smaller model, NOT {name}; its "
        f"activation factor depends on the layer's shape, so it does not carry over to {name} "
        "(measure that shape, on a machine with the memory, to calibrate it)"
    ]


def _measured_instead(name: str, sets: str, same_layers: bool) -> str:
    """The shrunk model's figures, said as what they are where no preset is written."""
    if same_layers:
        return (
            f"measured with {sets}, not {name} itself: the per-layer figures are {name}'s "
            "(depth and vocabulary do not change a layer), the totals the smaller model's"
        )
    return (
        f"measured with {sets}: a smaller model than {name}, of another layer shape; no "
        f"figure here is {name}'s"
    )


def calibrated_preset(m: Measurement) -> str:
    """A model preset (YAML text): the model's dimensions and the measured activation factor."""
    s, req = m.scenario, m.request
    dims = dict(m.named_model if overridden(m) and carries_over(m) else model_dims(s.model))
    dims["activation_factor"] = round(m.activation_factor(), 6)
    uncalibrated = m.predicted["activations"] / s.model.activation_factor
    head = [
        f"# Model preset calibrated by `tiersim measure` (PyTorch {m.torch_version}, {m.device}).",
        f"# Measured at seq_len {s.seq_len}, micro-batch {s.training.micro_batch_size}, "
        f"{req.dtype}, attention {req.attention}, optimizer {req.optimizer}.",
        f"# Activations retained by the {len(m.activations_per_layer)} layers: measured "
        f"{m.measured['activations']:,} B, tiersim's formula {uncalibrated:,.0f} B;",
        "# activation_factor = measured / formula. It holds for this implementation at this shape:",
        "# the a*s^2 and s*b terms scale differently, so recalibrate for another sequence length.",
        *(_comment(line) for line in shrink_lines(m)),
    ]
    return "\n".join(head) + "\n" + yaml.safe_dump(dims, sort_keys=False)


def _comment(text: str) -> str:
    """A sentence as YAML comment lines (a line break inside a value would end the comment)."""
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    wrap = textwrap.TextWrapper(98, "# ", "#   ", break_long_words=False, break_on_hyphens=False)
    return wrap.fill(text)
