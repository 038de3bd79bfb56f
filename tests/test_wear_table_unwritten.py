"""`tiersim wear`'s table on a drive nothing is written to: its lifetime is "never", and no
limit "binds" it (the table said "never (P/E cycles bind)")."""

from __future__ import annotations

import json

SCENARIO = """\
name: unwritten
model: {preset: gpt2}
training: {micro_batch_size: 1, seq_len: 1024}
hardware: {preset: dgx-h100}
"""


def test_an_unwritten_drive_lasts_forever_and_nothing_binds(cli, tmp_path):
    path = tmp_path / "unwritten.yaml"
    path.write_text(SCENARIO)  # no checkpoint, nothing homed on NVMe: 0 B written a step
    code, out, err = cli("wear", path)
    assert code == 0, err
    rows = {line.split("  ")[0]: line for line in out.splitlines()}
    assert "0 B" in rows["host written / step"]
    assert rows["lifetime"].split()[-3:] == ["never", "(nothing", "written)"]


def test_the_json_names_no_bound_for_a_drive_never_written(cli, tmp_path):
    """The report's `lifetime_bound_by` said "pe_cycles" for the same drive, whose
    `lifetime_days` is null: nothing binds a lifetime without end."""
    path = tmp_path / "unwritten.yaml"
    path.write_text(SCENARIO)
    code, out, err = cli("wear", path, "--format", "json")
    assert code == 0, err
    nvme = json.loads(out)["wear"]["nvme"]
    assert nvme["host_bytes_written_per_step"] == 0
    assert nvme["lifetime_days"] is None
    assert nvme["lifetime_bound_by"] is None


def test_a_written_drive_still_names_what_binds(cli, tmp_path):
    """With a checkpoint written to NVMe every step, its lifetime ends, and the P/E cycles or
    the rating bind it (dgx-h100's NVMe has a rating: 1 DWPD over 5 years)."""
    path = tmp_path / "written.yaml"
    path.write_text(SCENARIO + "checkpoint: {every_steps: 1, target: nvme, mode: async}\n")
    code, out, err = cli("wear", path, "--format", "json")
    assert code == 0, err
    nvme = json.loads(out)["wear"]["nvme"]
    assert nvme["host_bytes_written_per_step"] > 0
    assert nvme["lifetime_days"] > 0
    assert nvme["lifetime_bound_by"] in ("pe_cycles", "rated")
