"""The figure map (tiersim.engine.figures): every result field declares its rule, and a figure
new to the map is extrapolated, given a checkpoint's share, reported and compared with no
other change (issue 32: one line where it is measured, one where its rule is)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tiersim.analysis.checkpoint_interval import with_checkpoint
from tiersim.config.load import load_scenario
from tiersim.engine import figures, steady
from tiersim.engine.figures import Into, Rule, figure
from tiersim.engine.results import CheckpointRun, LinkStats, StepResult, TierStats
from tiersim.report.json_report import links_section
from tiersim.state.resolved import resolve

ROOT = Path(__file__).resolve().parents[1]
RESULT_TYPES = (LinkStats, TierStats, CheckpointRun, StepResult)


@pytest.mark.parametrize("record", RESULT_TYPES, ids=lambda t: t.__name__)
def test_every_result_field_declares_a_rule(record):
    named = [name for name, fig in figures.figures(record)]  # raises on a field without one
    assert named == [f.name for f in dataclasses.fields(record)]


def test_a_field_without_a_rule_is_refused():
    @dataclass(frozen=True)
    class Bare(LinkStats):
        queued_s: float = 0.0  # no figure(...): no rule

    with pytest.raises(TypeError, match=r"Bare\.queued_s declares no rule"):
        list(figures.figures(Bare))


# A hypothetical new figure: the time transfers waited for a link, added per period like
# busy_s, reported and compared; and what one checkpoint adds to it, amortised over the
# interval. The two lines a real one takes in engine/results.py:
@dataclass(frozen=True)
class QueuedLink(LinkStats):
    queued_s: float = field(default=0.0, metadata=figure(Rule.PER_PERIOD, json="queued_s",
                                                         compared=True))  # fmt: skip


@dataclass(frozen=True)
class QueuedCheckpoint(CheckpointRun):
    link_queued_s: dict[str, float] = field(
        default_factory=dict, metadata=figure(Rule.PER_PERIOD, into=Into("links", "queued_s"))
    )


def step(k: int) -> StepResult:
    """Run k (0, 1, 2) of three a period apart: each period adds 1 s of step, 0.5 s of compute,
    0.25 s of busy pcie, 0.125 s of queueing and 1,000 bytes host->device."""
    busy = 1.0 + 0.25 * k
    link = QueuedLink(
        bytes=4_000 + 1_000 * k,
        busy_s=busy,
        utilization=busy / (10.0 + k),
        bytes_by_direction={"host->gpu": 4_000 + 1_000 * k},
        queued_s=0.5 + 0.125 * k,
    )
    tier = TierStats(
        capacity_bytes=1e9,
        resident_bytes=100,
        peak_bytes=500,
        mean_bytes=200.0,
        low_bytes=100,
        bytes_read=0,
        bytes_written=4_000 + 1_000 * k,
        written_by_class={"weights": 4_000 + 1_000 * k},
    )
    return StepResult(
        time_s=10.0 + k,
        compute_s=6.0 + 0.5 * k,
        recompute_s=0.0,
        optimizer_s=1.0,
        exposed_transfer_s=0.0,
        overlap=0.5,
        tokens_per_step=4096,
        micro_batches=40,
        links={"pcie": link},
        tiers={"hbm": tier},
        events=1_000,
        wall_s=0.01,
    )


def test_a_new_figure_is_extrapolated_by_its_rule():
    runs = [step(k) for k in range(3)]
    # overlap 0.5 of 2 s of any link busy: 1 s a run, constant
    grown = steady.grow(runs, [2.0, 2.0, 2.0], periods=4)
    assert isinstance(grown, StepResult)
    link = grown.links["pcie"]
    assert isinstance(link, QueuedLink)
    # the last run's 0.75 s + 4 periods x 0.125 s = 1.25 s
    assert link.queued_s == 1.25
    # busy 1.5 + 4 x 0.25 = 2.5 s over a step of 12 + 4 x 1 = 16 s: 0.15625
    assert link.busy_s == 2.5 and grown.time_s == 16.0
    assert link.utilization == 2.5 / 16.0
    # bytes 6,000 + 4 x 1,000 = 10,000, exactly, as an integer
    assert link.bytes == 10_000 and link.bytes_by_direction == {"host->gpu": 10_000}
    assert isinstance(link.bytes, int)
    # a mean: 200 B over 12 s is 2,400 B.s, growing 200 B.s a period: 3,200 B.s over 16 s
    assert grown.tiers["hbm"].mean_bytes == 200.0
    assert grown.compute_s == 7.0 + 4 * 0.5
    assert grown.events == 3_000  # the cost of the three runs together


def test_a_new_figure_that_grows_unevenly_breaks_the_repetition_by_name():
    runs = [step(k) for k in range(3)]
    last = runs[2].links["pcie"]
    runs[2] = dataclasses.replace(runs[2], links={"pcie": dataclasses.replace(last, queued_s=1.0)})
    refused = steady.grow(runs, [2.0, 2.0, 2.0], periods=4)
    assert isinstance(refused, steady.NoRepetition)
    # 0.5, 0.625, 1.0: growths of 0.125 then 0.375
    assert refused.why.startswith("queued_s of pcie grows by 0.125 then 0.375 a period")


def test_a_new_figure_is_reported_and_compared():
    s = load_scenario(ROOT / "scenarios" / "default.yaml").scenario
    name = next(iter(s.hardware.links))
    r = dataclasses.replace(step(0), links={name: step(0).links["pcie"]})
    section = links_section(s, resolve(s), r)[name]
    assert section["queued_s"] == 0.5
    assert list(section)[-1] == "queued_s"  # after the keys the layout places
    assert "links.*.queued_s" in figures.compared_paths("links", QueuedLink)


def test_a_new_checkpoint_figure_takes_its_share_of_the_interval():
    s = load_scenario(ROOT / "scenarios" / "default.yaml", ["checkpoint.every_steps=8"]).scenario
    r = step(0)
    run = QueuedCheckpoint(
        interval_steps=None,
        bytes=1_000,
        write_s=1.0,
        stall_s=2.0,
        read_back_s=1.0,
        restart_s=60.0,
        mtbf_s=None,
        written_by_tier={},
        link_bytes={"pcie": {"host->gpu": 800}},
        link_busy_s={"pcie": 0.5},
        link_queued_s={"pcie": 0.25},
    )
    out = with_checkpoint(r, resolve(s), run)
    link = out.links["pcie"]
    # every 8 steps: 0.5 s + 0.25 s / 8 = 0.53125 s queued; busy 1 s + 0.5 s / 8 = 1.0625 s
    assert link.queued_s == 0.53125
    assert link.busy_s == 1.0625
    # 4,000 + 800 / 8 = 4,100 bytes; busy over the step with its share of the stall:
    # 1.0625 s / (10 s + 2 s / 8) = 1.0625 / 10.25
    assert link.bytes == 4_100 and link.bytes_by_direction == {"host->gpu": 4_100}
    assert link.utilization == 1.0625 / 10.25
