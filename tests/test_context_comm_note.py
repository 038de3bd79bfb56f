"""`parallel.context_comm` chooses how context-parallel attention exchanges K/V between the
`parallel.context` ranks: with context 1 there is none, so a non-default choice is noted
(W-NO-EFFECT) as the other settings without effect are, and the note is checked against what
the runs do: the step is the same as with the default ring."""

from __future__ import annotations

import json

import pytest

MODEL = (
    "{layers: 2, hidden: 64, heads: 4, ffn_hidden: 256, vocab: 1000, position: rope, norm: rmsnorm}"
)


def _scenario(tmp_path, parallel: str) -> object:
    path = tmp_path / f"s{len(list(tmp_path.iterdir()))}.yaml"
    path.write_text(
        f"name: s\nmodel: {MODEL}\ntraining: {{seq_len: 128}}\nparallel: {parallel}\n"
        "hardware: {preset: h200-hbf, tiers: {hbm: {capacity: 10 TB}}}\n"
    )
    return path


NOTE = (
    "parallel.context_comm: all_gather has no effect: it chooses how context-parallel attention "
    "exchanges keys and values between the context ranks, so it needs parallel.context > 1 to "
    "change anything (context is 1) (line 4) [W-NO-EFFECT]"
)


def test_context_comm_without_context_parallelism_is_noted_and_changes_nothing(tmp_path, cli):
    path = _scenario(tmp_path, "{context_comm: all_gather}")
    code, out, err = cli("validate", path)
    assert (code, out) == (0, f"{path}: valid scenario 's'\n")
    assert err == f"note: {path}: {NOTE}\n"
    code, out, err = cli("run", path, "--format", "json", "--out", tmp_path / "g")
    assert code == 0 and f"note: {path}: {NOTE}\n" in err
    gathered = json.loads(out)
    code, out, err = cli(
        "run", _scenario(tmp_path, "{}"), "--format", "json", "--out", tmp_path / "r"
    )
    assert code == 0 and "parallel.context_comm:" not in err  # the default is never noted
    ring = json.loads(out)
    assert gathered["step"] == ring["step"]  # what the note says: the same step


@pytest.mark.parametrize(
    "parallel", ["{context_comm: ring}", "{context: 2, data: 1, context_comm: all_to_all}"]
)
def test_context_comm_that_applies_is_not_noted(tmp_path, cli, parallel):
    code, _out, err = cli("validate", _scenario(tmp_path, parallel))
    assert code == 0 and "parallel.context_comm:" not in err
