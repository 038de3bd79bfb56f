"""An async checkpoint's drain that outlasts a whole step of its samples: its growth from
sample to sample does not hold at m (docs/invariants.md, seed 40 case 58).

An async checkpoint measured on samples of n, n + 1 and n + 2 micro-batches
(tiersim.engine.steady.grow_checkpoint) has its stall and the busy and in-flight seconds it
adds to each link (PER_PERIOD) extrapolated by their growth a period. That growth is the
drain's contention with the micro-batches it runs beside: where the drain outlasts one or
more whole steps after the checkpointed one, it runs beside every micro-batch of those
steps, so each sample's added period adds to it once per step spanned. At m the steps are
longer and the drain, as long in seconds, spans fewer of them and a fixed number of
micro-batches: its figures stop growing. Seed 40 case 58 of benchmarks/explore_wide.py,
reduced (tests/fixtures/drain-outlasts-steps.yaml: FSDP ZeRO-3, `pipeline: 2`, weights
homed on HBF, an async checkpoint every 2 steps to NVMe, 32 micro-batches): the samples of
4, 5 and 6 micro-batches have steps of about 1.7 ms and a drain of 5.11 ms that outlasts
two of them; their stalls 0.118, 0.160 and 0.201 us extrapolated to 1.28 us at 32, where
the drain (the step 3.11 ms) outlasts one step and ends within the second, and the stall
simulated in full is 0.235 us (and the HBF link's busy seconds 0.312 against 0.367 ms).

Such samples are not extrapolated where a figure grows (a flat one holds: the drain's
figures do not depend on the steps it spans): later samples are tried or m simulated in
full (tiersim.engine.later_samples), as for a falling stall.

Nor where the link seconds the checkpoint adds (busy, in flight) fall from sample to sample:
the drain then hides more of the step's own transfers on that link with every period, which
holds only while it runs beside all of them; at m, its seconds fixed, it hides a fixed part,
and the line would fall below 0. Seed 40 case 58 itself (tests/fixtures/drain-hides-
transfers.yaml, reduced: MoE, `pipeline: 2`, `virtual_pipeline: 2`, weights on HBF, 256
micro-batches): the drain of 15.2 ms ends within the next step in every sample, the HBF
busy time it adds 826.5, 808.8 and 791.1 us on samples of 6, 8 and 10 micro-batches, -1.39
ms extrapolated to 256 (764.2 us in full; the stall 18.0 against 0.81 us).
"""

from __future__ import annotations

from tiersim.engine.figures import additive
from tiersim.engine.results import CheckpointRun
from tiersim.engine.steady import NoRepetition

ADDED = ("link_busy_s", "link_in_flight_s")  # the link seconds a checkpoint adds


def checked(runs: list[CheckpointRun], grown: CheckpointRun | NoRepetition, noise_s: float):
    """`grown` (steady.grow_checkpoint of `runs`), or NoRepetition where a run's drain
    outlasts a step after its checkpointed one and a figure was extrapolated (grew), or
    where the link seconds it adds fall from sample to sample (by more than `noise_s`,
    the samples' round-off: module docstring)."""
    if isinstance(grown, NoRepetition):
        return grown
    first, last = (additive(r, {}, ("checkpoint",)) for r in (runs[0], runs[-1]))
    if any(r.drain_steps for r in runs) and additive(grown, {}, ("checkpoint",)) != last:
        spans = max(r.drain_steps for r in runs)  # a figure grew: not flat
        return NoRepetition(
            f"the async checkpoint's drain outlasts {spans} step(s) after the checkpointed "
            "one in the samples, fewer at the step's length: its growth from sample to "
            "sample does not hold"
        )
    falls = sorted({k[-1] for k in first if k[-2] in ADDED and last[k] < first[k] - noise_s})
    if falls:
        return NoRepetition(
            f"the link time the async checkpoint adds on {', '.join(falls)} falls as the "
            "step lengthens: its drain hides more of the step's own transfers, until it ends "
            "within them"
        )
    return grown
