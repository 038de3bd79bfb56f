"""`tiersim run`'s checkpoint line says what its recovery adds up to: the default scenario's
73.9 min, for an 11.79 GB checkpoint read back in under a second, is mostly the half interval of
steps redone, which the line did not say."""

from __future__ import annotations

from conftest import SCENARIOS


def test_the_default_runs_recovery_is_said_part_by_part(cli, tmp_path):
    code, out, err = cli("run", SCENARIOS / "default.yaml", "--out", tmp_path)
    assert code == 0, err
    (line,) = [ln for ln in out.splitlines() if ln.startswith("Checkpoint (")]
    # restart: the scenario leaves checkpoint.restart at its default, 300 s = 5.0 min;
    # read-back: 6,738,415,616 params x (2 + 4 + 8) B / 8 data-parallel ranks = 11,792,227,328 B
    #   from the h200-hbf NVMe at 13 GB/s: 11,792,227,328 / 13e9 = 0.9071 s;
    # redone: every 1000 steps of 8.267 s (the step the report's headline gives), half an
    #   interval on average, 8,266.6 / 2 = 4,133.3 s, plus the async drain's lag, the write
    #   less a stall of 0: durable 0.320 s after the step's update (its first snapshots began
    #   1.6 s before, each layer's as its update ended; 1.917 s timed from them, 4,436.1 s
    #   before issue 36): 4,133.6 s = 68.9 min; 300 + 0.907 + 4,133.6 = 4,434.5 s = 73.9 min
    assert "8.267 s per step" in out and "durable 320.29 ms after its step's update" in line
    assert "training stalls 0 s" in line
    assert (
        "recovery 73.9 min (restart 5.0 min + read-back 907.32 ms + redoing the steps since "
        "the checkpoint 68.9 min)"
    ) in line


def test_a_checkpoint_every_step_is_said_in_the_singular(cli, tmp_path):
    code, out, err = cli(
        "run",
        SCENARIOS / "seed-1b-adam.yaml",
        "--out",
        tmp_path,
        "--set",
        "checkpoint.every_steps=1",
    )
    assert code == 0, err
    (line,) = [ln for ln in out.splitlines() if ln.startswith("Checkpoint (")]
    assert ", every 1 step)" in line or ", every 1 step," in line, line
