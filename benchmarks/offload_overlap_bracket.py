"""How much of DeepSpeed ZeRO-2's gradient round trip each published offload run implies is
exposed (docs/validation.md: ZeRO-Offload Fig. 8).

Each ZeRO-Offload Figure 8 run is simulated twice with the shipped figures:
as shipped (`training.offload.overlap_comm` off, DeepSpeed's default at ZeRO-2: the copies to
and from the host on the compute stream, the whole round trip exposed) and with overlap_comm
on (the copies beside backward). The published time falls between the two when part of the
round trip is hidden; the fraction exposed it implies is

    f = (published - overlapped) / (in stream - overlapped)

1 is the in-stream model, 0 full overlap. One physical partial overlap would give one f (or
an f that varies smoothly with the micro-batch); the printed fractions say whether it does.
The fit of dgx2's gpu.efficiency on the 1B run is held as shipped (refitting it with the copies
overlapped moves every figure by at most the 1B run's own difference, 2.6 %). Ma and Wang's
3B run is left out: the path overhead fitted on their 1.5B run depends on the same choice
(2.402 Gparam/s in stream, 1.651 overlapped, while it was a rate per parameter; now a time
per tensor), so f at fixed figures says nothing there.

Run: .venv/bin/python benchmarks/offload_overlap_bracket.py  (a few seconds)
"""

from __future__ import annotations

from tiersim.config.load import load_scenario
from tiersim.config.schema import Scenario
from tiersim.groundtruth.published import load_references
from tiersim.runner import simulate

RUNS = ("ren2021-zero-offload",)


def overlapped(scenario: Scenario) -> Scenario:
    """The same scenario with DeepSpeed's overlap_comm on."""
    training = scenario.training
    offload = training.offload.model_copy(update={"overlap_comm": True})
    return scenario.model_copy(
        update={"training": training.model_copy(update={"offload": offload})}
    )


def main() -> None:
    print(f"{'run':34s} {'micro-batch':>11s} {'in stream s':>11s} {'overlapped s':>12s}", end="")
    print(f" {'published s':>11s} {'f':>6s}")
    for ref in load_references():
        if not ref.name.startswith(RUNS) or ref.metric != "time_s":
            continue
        scenario = load_scenario(ref.scenario).scenario
        serial = getattr(simulate(scenario), ref.metric)
        hidden = getattr(simulate(overlapped(scenario)), ref.metric)
        f = (ref.iteration_time_s - hidden) / (serial - hidden)
        mark = " (fit)" if ref.calibrates else ""
        print(f"{ref.name + mark:34s} {scenario.training.micro_batch_size:11d}", end="")
        print(f" {serial:11.2f} {hidden:12.2f} {ref.iteration_time_s:11.2f} {f:6.2f}")


if __name__ == "__main__":
    main()
