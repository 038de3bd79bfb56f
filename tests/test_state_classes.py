"""The table of state classes: the scenario format and every layer agree with it."""

from __future__ import annotations

import pytest

from tiersim.config.schema import ExpertPlacement, Parallel, Placement, Precision, Shard, Training
from tiersim.engine.results import TierStats
from tiersim.state import classes


def test_the_format_has_a_key_for_each_class_that_needs_one():
    placed = [c.name for c in classes.STATE_CLASSES if c.placed]
    assert list(Placement.model_fields) == [*placed, "optimizer_compute", "experts"]
    # the routed experts' own homes: the per-parameter classes
    per_parameter = [c.name for c in classes.STATE_CLASSES if c.precision]
    assert list(ExpertPlacement.model_fields) == per_parameter
    shardable = [c.name for c in classes.STATE_CLASSES if c.shardable]
    assert list(Shard.model_fields) == shardable
    keys = [c.precision for c in classes.STATE_CLASSES if c.precision]
    # and `compute`: the precision the layers run in (all-gathered, activations), no class
    assert list(Precision.model_fields) == [*keys, "compute"]


def test_zero_stages_shard_as_the_zero_paper_says():
    # Rajbhandari et al. 2020 §5: P_os (stage 1) partitions optimizer states (with the fp32
    # master copy), P_os+g (2) adds gradients, P_os+g+p (3) adds parameters.
    assert classes.zero_sharded(0) == ()
    assert set(classes.zero_sharded(1)) == {"master", "optimizer"}
    assert set(classes.zero_sharded(2)) == {"master", "optimizer", "gradients"}
    assert set(classes.zero_sharded(3)) == {"master", "optimizer", "gradients", "weights"}
    assert max(s for c in classes.STATE_CLASSES if (s := c.zero_stage) is not None) == 3
    assert Parallel.model_fields["zero_stage"].annotation.__args__ == (0, 1, 2, 3)


def test_every_optimizer_the_format_takes_has_its_state_counted():
    assert Training.model_fields["optimizer"].annotation.__args__ == classes.OPTIMIZER_NAMES
    by_name = {o.name: o.values_per_parameter for o in classes.OPTIMIZERS}
    # two moments (Adam, AdamW, 8-bit AdamW), one (momentum SGD, Lion, Muon's momentum on
    # matrices), none (SGD), factored (Adafactor)
    assert by_name == {
        "adam": 2,
        "adamw": 2,
        "sgd": 0,
        "sgd_momentum": 1,
        "adafactor": None,
        "lion": 1,
        "adamw8bit": 2,
        "muon": 1,
    }


def test_what_a_checkpoint_copies_and_what_a_micro_batch_writes():
    assert classes.CHECKPOINTED == ("weights", "master", "optimizer")
    assert classes.PER_MICRO_BATCH == ("gradients", "activations")
    assert classes.OPTIMIZER_KEPT == ("master", "optimizer")
    assert classes.CHECKPOINT_WRITES not in classes.NAMES  # a checkpoint is not a class


def test_a_misspelt_class_is_an_error():
    with pytest.raises(ValueError, match="no state class 'optimiser'"):
        classes.state_class("optimiser")
    with pytest.raises(ValueError, match="no state class 'checkpoint'"):
        TierStats(0.0, 0, 0, 0.0, 0, 0, 0, written_by_class={"checkpoint": 1})
    stats = TierStats(
        0.0, 0, 0, 0.0, 0, 0, 5, written_by_class={"weights": 2}, checkpoint_written=3
    )
    assert stats.written_by_source == {"weights": 2, "checkpoint": 3}
