"""Review 2026-12-07 (j): a reliability engineer planning checkpoint intervals for a 2,048-GPU
Llama 3 70B run with HBF (docs/review-2026-12-07-j.md). Each test fails on the tree before its
fix; expected values are worked by hand in each."""

from conftest import SCENARIOS

from tiersim.report.checkpoint_text import checkpoint_lines
from tiersim.report.checkpoint_wear import wear_note

DEFAULT = SCENARIOS / "default.yaml"


def test_no_failure_rate_names_both_keys_that_set_one():
    """A 2,048-GPU run's failure rate is one GPU's MTBF (failures.gpu_mtbf, the Llama 3
    report's 2,111 GPU-days); the line named only failures.mtbf, the job's. A blocking
    checkpoint stalling 73.23 ms every 16 steps of 7.2813 s: goodput with no failures
    116.5008 / (116.5008 + 0.07323) = 99.9372 %, 99.94 % at two decimals."""
    interval_s, stall_s = 16 * 7.2813, 0.07323
    ck = {
        "mode": "blocking",
        "target": "nvme",
        "interval_steps": 16,
        "bytes": 482_363_840,
        "write_s": stall_s,
        "stall_s": stall_s,
        "recovery_s": None,
        "mtbf_s": None,
        "goodput": interval_s / (interval_s + stall_s),
    }
    (line,) = checkpoint_lines(ck, 7.2813)
    assert line.endswith(
        "no failure rate set (failures.mtbf or failures.gpu_mtbf): goodput 99.94 % counts "
        "stalls only"
    )


def _entry(host_per_day: float, checkpoint_per_day: float) -> dict:
    return {
        "interval_steps": 1,
        "checkpoint_bytes_written_per_day": checkpoint_per_day,
        "host_bytes_written_per_day": host_per_day,
        "drive_writes_per_day": host_per_day / 4e12,  # a 4 TB HBF tier
        "rated_drive_writes_per_day": None,
        "lifetime_days": 1128.9,
        "pe_lifetime_days": 1128.9,
        "rated_lifetime_days": None,
        "warranty_days": None,
    }


def test_unbudgeted_wear_names_the_checkpoints_share_of_a_tier_that_holds_state():
    """An async checkpoint to HBF every step, HBF also homing master and optimizer: 482.36 MB
    a checkpoint x 11,866 steps a day = 5.72 TB/day of the tier's 10.63 TB/day (the update's
    413.46 MB a step the rest). The note said "checkpointing every step, hbf takes 10.63 TB/day"
    as if the checkpoints wrote it all; a tier only the checkpoints write keeps its words."""
    ours = 482_363_840 * 11_866  # 5.7237e12 B
    theirs = (137_820_000 + 275_640_000) * 11_866  # master + optimizer shards, 4.906e12 B
    line = wear_note("hbf", _entry(ours + theirs, ours), None)
    assert "hbf takes 10.63 TB/day of writes, 5.72 TB/day of them the checkpoints' (" in line
    assert "(2.657 drive writes/day)" in line  # 10.63e12 / 4e12
    alone = wear_note("nvme", _entry(ours, ours), None)
    assert "nvme takes 5.72 TB/day of writes (1.431 drive writes/day)" in alone
    assert "of them" not in alone


def test_auto_misspelt_is_told_auto(cli):
    """`every_steps` takes a whole number or 'auto'; 'atuo' was refused with what it takes but,
    unlike `checkpoint.mode: asynch`, without the word meant. A word far from it gets none."""
    code, _, err = cli("validate", DEFAULT, "--set", "checkpoint.every_steps=atuo")
    assert code == 2
    assert f"{DEFAULT}: checkpoint.every_steps: input should be a valid integer or 'auto'" in err
    assert "(got 'atuo') (did you mean 'auto'?)" in err
    code, _, err = cli("validate", DEFAULT, "--set", "checkpoint.every_steps=Auto")
    assert code == 2 and "(did you mean 'auto'?)" in err
    code, _, err = cli("validate", DEFAULT, "--set", "checkpoint.every_steps=abc")
    assert code == 2 and "(got 'abc')" in err and "did you mean" not in err


def _async_line(write_s: float, span_s: float) -> str:
    ck = {
        "mode": "async",
        "target": "nvme",
        "interval_steps": 1,
        "bytes": 482_363_840,
        "write_s": write_s,
        "span_s": span_s,
        "stall_s": 0.0,
        "recovery_s": None,
        "mtbf_s": None,
        "goodput": 1.0,
    }
    return checkpoint_lines(ck, 7.2813)[0]


def test_an_async_checkpoint_says_how_long_its_copies_ran():
    """482,363,840 B through NVMe's 6.6 GB/s write port take at least 73.09 ms, but the async
    line said "durable 11.81 ms after its step's update" and nothing else: the snapshots of
    units updated early began before the update was over. The line now gives the copies'
    span from the first snapshot where it is longer; a blocking one (span = write) and one
    whose snapshot waited for the previous drain (span < write) keep their words."""
    line = _async_line(0.01181, 0.36494)
    assert "durable 11.81 ms after its step's update (its copies ran 364.94 ms from the " in line
    assert 0.36494 >= 482_363_840 / 6.6e9  # 73.09 ms: the span, not the write, is bounded
    assert "its copies ran" not in _async_line(0.07323, 0.07323)
    assert "its copies ran" not in _async_line(21.92, 11.89)


def test_the_report_gives_the_span_bytes_over_bandwidth_bound():
    """default.yaml's async checkpoint (its golden report): 11,792,227,328 B (6,738,415,616
    parameters x (2 + 4 + 8) B / 8 ranks) through NVMe's 6.6 GB/s write port take at least
    1.7867 s; `span_s` (from the first snapshot) is at least that, `write_s` (from the update
    over) may be less."""
    import json
    from pathlib import Path

    golden = Path(__file__).parent / "golden" / "reports" / "default.json"
    ck = json.loads(golden.read_text())["checkpoint"]
    assert ck["bytes"] == 6_738_415_616 * 14 // 8
    assert ck["span_s"] >= 11_792_227_328 / 6.6e9 > ck["write_s"]
