"""The rest of `tiersim.api`: what the CLI's other commands do, as functions (re-exported by
tiersim/api.py; import them from there): the scenario's notes and checks (`tiersim
validate`), its inventory and host memory timeline (`tiersim inventory`), a model's facts
(`tiersim presets`), two designs compared (`tiersim compare`) and the wear of its flash
tiers, with the remedies simulated (`tiersim wear`).

Like api.py, nothing heavy at import: the engine and the analyses load when a function that
needs them is called (the CLI's start-up, tests/test_cli_startup.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiersim.config.load import Loaded
from tiersim.core.records import record

if TYPE_CHECKING:
    from collections.abc import Callable

    from tiersim.analysis.wear import Assessment, TierWear
    from tiersim.core.errors import Problem
    from tiersim.runner import Run as Lifecycle
    from tiersim.state.host_timeline import HostTimeline
    from tiersim.state.inventory import Inventory


def notes(loaded: Loaded) -> list[Problem]:
    """What the scenario sets that the models do not use: notes, not problems (a figure
    unchanged by such a key is not a measured non-effect); the CLI prints them as `note:`."""
    from tiersim.runner import loaded_notes

    return loaded_notes(loaded)


def check(
    loaded: Loaded, path: str | Path | None = None, raw: dict[str, Any] | None = None
) -> None:
    """Raise InputError for what `tiersim validate` (and `run`) refuse beyond the schema:
    routes for every movement the placement implies, the wear and checkpoint models' inputs,
    a plan: section's values. `path`: the scenario's file (default: `loaded.source`); `raw`:
    its mapping with the overrides applied (read again from `path` where not given)."""
    from tiersim.rulebook import check_scenario

    check_scenario(loaded, Path(path if path is not None else loaded.source), raw)


def inventory(loaded: Loaded) -> Inventory:
    """The scenario's state inventory (no simulation): bytes per class, whole model and per
    GPU; `api.inventory_table` is it as a table."""
    from tiersim.runner import inventory as build

    return build(loaded.scenario)


def host_memory(loaded: Loaded, inv: Inventory | None = None) -> HostTimeline | None:
    """The step's host memory timeline (no simulation; engine/host_memory.py): one GPU's share
    of host DRAM in order and its node's; None where the step puts nothing there. `inv`: the
    scenario's inventory, where the caller has it."""
    from tiersim.engine.host_memory import host_timeline
    from tiersim.runner import inventory as build
    from tiersim.state.resolved import resolve

    return host_timeline(resolve(loaded.scenario), build(loaded.scenario) if inv is None else inv)


def model_facts(loaded: Loaded) -> dict[str, Any]:
    """The model's shape as `tiersim presets` lists it: parameters, layers, widths, heads,
    vocabulary, the longest sequence and, for a mixture of experts, the experts' widths."""
    from tiersim.state.inventory import model_summary
    from tiersim.state.model import build_model

    spec = loaded.scenario.model
    model = build_model(spec)
    out = {**model_summary(model), "max_positions": spec.max_positions}
    return out | _expert_widths(getattr(model, "moe", None))


def _expert_widths(moe: Any) -> dict[str, int | None]:
    """A mixture of experts' widths, which `ffn_hidden` (the dense layers') is not: the routed
    experts', and the shared experts' count and width. Every MoE row has the three keys (the
    width null where there are no shared experts); a dense row none, as with `experts`."""
    if moe is None:
        return {}
    return {
        "expert_ffn_hidden": moe.ffn_hidden,
        "shared_experts": moe.shared,
        "shared_expert_ffn_hidden": moe.shared_ffn_hidden if moe.shared else None,
    }


def compare(a: Any, b: Any, a_report: dict[str, Any], b_report: dict[str, Any]) -> dict[str, Any]:
    """`tiersim compare`'s content (its JSON less the labels): the inputs that differ, the
    outputs that moved (B - A, B / A), and `cost` where either scenario gives a price.
    The reports are the runs' (`api.run(a).report`) or results folders' report.json; the
    scenarios are taken as api.run takes them (a scenario, a file's path or a mapping)."""
    from tiersim.api_inputs import compared
    from tiersim.report.compare import compare as differences
    from tiersim.report.cost import cost_comparison
    from tiersim.report.utilization import mfu_peak_note, peak_note

    a, b = compared(a, b, a_report, b_report)
    doc_a, doc_b = compared_documents(a, b)
    out = differences(doc_a, doc_b, dict(a_report), dict(b_report))
    peaks = {"A": mfu_peak_note(a.scenario), "B": mfu_peak_note(b.scenario)}
    for row in out["outputs"]:
        if row["path"] == "step.mfu" and any(peaks.values()):
            row["of_peak"] = peak_note(peaks)
    cost = cost_comparison(a.scenario, b.scenario, a_report, b_report)
    if cost is not None:
        out["cost"] = cost
    return out


def compared_documents(a: Loaded, b: Loaded) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both scenarios' documents with the presets both name put back (`hardware.preset:
    dgx-h100`, `model.preset`, `model.hf_config`): a changed preset is an input that differs,
    listed beside the values it changed. The document itself names no preset (it writes every
    value out: `hardware.preset: none`), as does a results folder's scenario.yaml: against
    one, a preset is not compared (its values are). The attention kernel is the one the run
    counts and times: a kernel left out (null) is its implementation's default, which showed
    as `-` against B's `flash` (docs/review-2026-12-07-e.md)."""
    from tiersim.config.document import SOURCES, scenario_document
    from tiersim.state.accounting import accounting_for

    docs = scenario_document(a.scenario), scenario_document(b.scenario)
    for doc, x in zip(docs, (a, b), strict=True):  # null: the implementation's (megatron eager)
        doc["training"]["attention_kernel"] = accounting_for(x.scenario).kernel
    for section, key in SOURCES:
        values = [getattr(getattr(x.scenario, section), key) for x in (a, b)]
        if None not in values:
            for doc, value in zip(docs, values, strict=True):
                doc[section][key] = value
    return docs


@record
class Wear:
    """`tiersim wear`: each flash tier's assessment (a failing one with its
    gradient-accumulation remedy simulated), and the run it was read from; `simulate` runs
    a changed scenario (kept: each once), as the break-even ranges need."""

    assessed: dict[str, Assessment]
    lifecycle: Lifecycle

    @property
    def simulate(self) -> Callable[..., Any]:
        return self.lifecycle.simulated

    def dicts(self) -> dict[str, dict[str, Any]]:
        """Each tier's assessment as `tiersim wear --format json` writes it."""
        from tiersim.report.wear import assessment_dict

        tiers = self.lifecycle.given.hardware.tiers
        return {name: assessment_dict(a, tiers[name]) for name, a in self.assessed.items()}


def wear(loaded: Loaded) -> Wear:
    """Simulate `loaded` (checked as `tiersim run` checks it) and judge each flash tier's
    wear against its budget."""
    from tiersim.analysis.wear import assess
    from tiersim.analysis.wear_remedy import with_simulated_remedies
    from tiersim.runner import Run as Lifecycle

    built = Lifecycle.of(loaded)  # its changed scenarios are its variants, each run once
    judged = assess(loaded.scenario, built.result)
    return Wear(with_simulated_remedies(loaded.scenario, judged, built.simulated), built)


def flash_span(w: TierWear) -> tuple[float, bool]:
    """A tier's whole device in physical bytes, and whether wear is levelled over all of
    its capacity (else over its wear span only)."""
    from tiersim.analysis.flash import device_physical_bytes, levelled_whole

    return device_physical_bytes(w), levelled_whole(w)
