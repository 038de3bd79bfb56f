"""`run` and `validate` note a `training.offload` key the chosen framework does not read
(config/framework.py offload_notes): DeepSpeed's own keys under FSDP2 or the generic engine,
the submodule fetch's bucket and bound where parameters are fetched a layer at a time. Each
note is checked against what the runs do: the figures it says the key leaves alone stay."""

from __future__ import annotations

import json

import pytest

from tiersim.state.deepspeed_buckets import BUCKET as DEFAULT_BUCKET

HEAD = """name: s
model: {parameters: 1000000000, layers: 2, forward_flops_per_token_per_layer: 1.0e+9}
training:
  framework: FRAMEWORK
  optimizer: adam
"""
OFFLOAD = """  offload:
    sub_group_size: 500000000
    buffer_count: 2
    overlap_comm: false
    reduce_bucket_size: 50000000
"""  # the keys on lines 7-10
TAIL = """parallel: {data: 2, zero_stage: 2}
placement: {gradients: dram, master: dram, optimizer: dram, optimizer_compute: cpu}
hardware: {preset: h200-hbf}
"""


def _scenario(framework: str | None, offload: str = OFFLOAD) -> str:
    head = (
        HEAD.replace("FRAMEWORK", framework)
        if framework
        else HEAD.replace("  framework: FRAMEWORK\n", "")
    )
    return head + offload + TAIL


def _notes(path, engine: str, first_line: int) -> str:
    why = f"and training.framework is {engine}"
    line = iter(range(first_line, first_line + 4))
    return (
        f"note: {path}: training.offload.sub_group_size: 500,000,000 has no effect: a DeepSpeed "
        f"setting (the CPU optimizer's ZeRO-3 sub-groups), {why} (line {next(line)}) "
        "[W-NO-EFFECT]\n"
        f"note: {path}: training.offload.buffer_count: 2 has no effect: a DeepSpeed setting "
        f"(the pinned swap buffers of optimizer state on NVMe), {why} (line {next(line)}) "
        "[W-NO-EFFECT]\n"
        f"note: {path}: training.offload.overlap_comm: false has no effect: a DeepSpeed "
        "setting (whether ZeRO-1/2's gradient copies run on the compute stream), "
        f"{why} (line {next(line)}) [W-NO-EFFECT]\n"
        f"note: {path}: training.offload.reduce_bucket_size: 50,000,000 has no effect: a "
        "DeepSpeed setting (ZeRO's gradient reduce bucket: its buffer and its division), "
        f"{why} (line {next(line)}) [W-NO-EFFECT]\n"
    )


def _others(err: str) -> str:
    """Standard error without the note on FSDP2's master copy (review 2026-12-08 b: the
    schema's default precision under framework fsdp; tests/test_review_2026_12_08_b.py), which
    these tests, on the offload keys, do not look at."""
    master = "training.precision.master: fp32 beside weights bf16 under training.framework: fsdp"
    return "".join(x for x in err.splitlines(keepends=True) if master not in x)


def _run(cli, path, out, *extra) -> tuple[dict, str]:
    code, stdout, err = cli("run", path, "--format", "json", "--out", out, *extra)
    assert code == 0, err
    return json.loads(stdout), _others(err)


@pytest.mark.parametrize(
    "framework, engine, first_line",
    [
        ("fsdp", "fsdp (FSDP2's engine)", 7),
        (None, "not set (tiersim's generic engine)", 6),  # no framework line above the keys
    ],
)
def test_deepspeed_keys_elsewhere_are_noted_and_change_nothing(
    write, cli, tmp_path, framework, engine, first_line
):
    path = write(_scenario(framework))
    code, out, err = cli("validate", path)
    assert (code, out) == (0, f"{path}: valid scenario 's'\n")
    assert _others(err) == _notes(path, engine, first_line)
    given, err = _run(cli, path, tmp_path / "a")
    assert _notes(path, engine, first_line) in err
    # what the notes say: the same run with none of the four keys gives the same figures
    plain = write(_scenario(framework, offload=""), "plain.yaml")
    assert _others(cli("validate", plain)[2]) == ""
    left_out, _ = _run(cli, plain, tmp_path / "b")
    for section in ("step", "tiers", "inventory", "links"):
        assert given[section] == left_out[section], section


def test_under_deepspeed_the_same_keys_are_read_and_not_noted(write, cli, tmp_path):
    path = write(_scenario("deepspeed"))
    code, out, err = cli("validate", path)
    assert (code, out) == (0, f"{path}: valid scenario 's'\n")
    # no note: the keys are DeepSpeed's own, read here
    assert err == ""
    given, err = _run(cli, path, tmp_path / "a")
    assert [x for x in err.splitlines() if "note:" in x] == []
    # one of them at work: the reduce bucket, by today's release (training.deepspeed.version
    # latest, the default) a timeline part of its own from the backward's first gradient:
    # 5e7 x 2 B (the 16-bit weights) = 100,000,000 B, left out DeepSpeed's 5e8 x 2 B =
    # 1,000,000,000 B; neither in the workspace class, so the engine's peak is the same
    # (before 0.3.17, 5e7 x 4.5 x 2 B = 450 MB all step there: tests/test_deepspeed_buffers.py)
    unset = ("--set", "training.offload.reduce_bucket_size=null")
    without, _ = _run(cli, path, tmp_path / "b", *unset)
    hbm, hbm_without = given["tiers"]["hbm"], without["tiers"]["hbm"]
    assert hbm["engine_peak_bytes"] == hbm_without["engine_peak_bytes"]
    timeline, timeline_without = given["memory_timeline"], without["memory_timeline"]
    given_bucket = DEFAULT_BUCKET.replace("5e8 by default", "5e7 given")  # named by the size
    assert timeline["peak_parts"][given_bucket] == 100_000_000
    assert timeline_without["peak_parts"][DEFAULT_BUCKET] == 1_000_000_000
    allocated = timeline["peak_allocated_bytes"] - timeline_without["peak_allocated_bytes"]
    assert allocated == 100_000_000 - 1_000_000_000


@pytest.mark.parametrize(
    "framework, fetch, said",
    [
        ("fsdp", None, "layer, FSDP2's default"),
        ("deepspeed", "layer", "layer"),
        (None, None, "layer, the generic engine's default"),
    ],
)
def test_the_submodule_fetchs_keys_are_noted_where_a_layer_is_fetched_whole(
    write, cli, framework, fetch, said
):
    training = {"framework": framework} if framework else {}
    offload = {"fetch": fetch} if fetch else {}
    raw = {
        "name": "s",
        "hardware": {"preset": "h200-hbf"},
        "model": {"parameters": 1_000_000_000, "layers": 2},
        "training": {**training, "offload": {**offload, "prefetch_bucket_size": 1000}},
    }
    path = write(raw)
    code, _, err = cli("validate", path)
    assert code == 0
    err = _others(err)
    assert err.startswith(
        f"note: {path}: training.offload.prefetch_bucket_size: 1,000 has no effect: a "
        "submodule fetch's setting (how many parameters a submodule prefetch gathers), and "
        f"parameters are fetched a layer at a time (training.offload.fetch: {said})"
    )
    assert err.count("note:") == 1


def test_no_note_where_the_submodule_fetch_is_chosen(write, cli):
    raw = {
        "name": "s",
        "hardware": {"preset": "h200-hbf"},
        "model": {"parameters": 1_000_000_000, "layers": 2},
        "training": {
            "framework": "fsdp",
            "offload": {"fetch": "submodule", "max_live_parameters": 1000},
        },
    }
    assert _others(cli("validate", write(raw))[2]) == ""


ZERO3_OFF = "  offload:\n    overlap_comm: false\n"  # the key on line 7


def test_overlap_comm_off_at_zero3_is_noted_shown_null_and_changes_nothing(write, cli, tmp_path):
    # DeepSpeed's stage3.py runs reduce-and-partition on the default stream with overlap_comm
    # off; tiersim runs ZeRO-3's copies beside backward whatever the key says, so the note
    # says so and the report does not claim the setting was in force
    path = write(_scenario("deepspeed", ZERO3_OFF).replace("zero_stage: 2", "zero_stage: 3"))
    code, _, err = cli("validate", path)
    assert code == 0
    assert err == (
        f"note: {path}: training.offload.overlap_comm: false has no effect at ZeRO-3: tiersim "
        "runs ZeRO-3's gradient reduce-scatters (and any copies to the host) beside backward, "
        "as DeepSpeed does with it on (off, DeepSpeed's stage3.py runs them on the compute "
        "stream, which is not modelled; parallel.overlap_gradient_reduce: false makes "
        "backward wait for each reduce-scatter, not for the copies) (line 7) [W-NO-EFFECT]\n"
    )
    given, _ = _run(cli, path, tmp_path / "a")
    assert given["offload"]["overlap_comm"] is None
    on, err_on = _run(cli, path, tmp_path / "b", "--set", "training.offload.overlap_comm=true")
    assert "note:" not in err_on and on["offload"]["overlap_comm"] is True  # ZeRO-3's default
    for section in ("step", "tiers", "inventory", "links"):
        assert given[section] == on[section], section
    code, table, _ = cli("run", path, "--out", tmp_path / "c")
    assert code == 0 and "overlap_comm off" not in table  # nor says so in words


def test_under_fsdp_overlap_comm_is_null_in_the_report_and_the_written_scenario(
    write, cli, tmp_path
):
    # FSDP2 has no overlap_comm: neither its report nor its scenario.yaml says true (which a
    # rerun of that file then noted as a DeepSpeed key with no effect)
    path = write(_scenario("fsdp", offload=""))
    report, err = _run(cli, path, tmp_path / "a")
    assert report["offload"]["overlap_comm"] is None and "note:" not in err
    written = tmp_path / "a" / "scenario.yaml"
    assert "    overlap_comm: null\n" in written.read_text()
    assert _others(cli("validate", written)[2]) == ""
