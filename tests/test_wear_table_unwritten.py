"""`tiersim wear`'s table on a drive nothing is written to: its lifetime is "never", and no
limit "binds" it (the table said "never (P/E cycles bind)")."""

from __future__ import annotations

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
