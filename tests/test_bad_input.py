"""The bad-input round of docs/bad-input.md: what a hostile or careless input got before each
fix (a flood of lines, Python's reprs, silence) and what it gets now. All in-process."""

from __future__ import annotations

import argparse
import errno

import pytest
from problem_lines import said

from tiersim.cli.commands.sweep import workers_and_where
from tiersim.plan.run import PlanOptions, parallelism

SMALL = "name: small\nmodel: {preset: gpt2}\ntraining: {seq_len: 1024}\n"


def test_a_file_of_many_unknown_keys_lists_thirty_and_counts_the_rest(cli, write):
    # 45 unknown top-level keys (another program's settings pasted in): 30 listed, then one
    # line for the other 45 - 30 = 15 (76,000 keys took 18 s of CPU and printed each)
    path = write(SMALL + "".join(f"k{i}: {i}\n" for i in range(45)))
    code, _, err = cli("validate", path)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 31
    assert said(lines[0], path).coded == ("E-KEY-UNKNOWN", "k0")
    assert said(lines[29], path).coded == ("E-KEY-UNKNOWN", "k29")
    assert said(lines[30], path).coded == ("E-KEY-UNKNOWN", "")
    assert "... and 15 more key paths with problems, from k30 on" in lines[30]


def test_a_date_where_text_is_expected_is_shown_as_written(cli, write):
    # `name: 2026-12-07` is a date to YAML 1.1: said as the file writes it, not as
    # datetime.date(2026, 12, 7), with what to do
    path = write(SMALL.replace("name: small", "name: 2026-12-07"))
    code, _, err = cli("validate", path)
    assert code == 2 and said(err.strip(), path).coded == ("E-NAME", "name")
    assert "(got 2026-12-07)" in err and "datetime.date(" not in err
    assert "YAML reads it as a date: put it in quotes" in err


def test_a_toml_datetime_is_shown_as_written(cli, tmp_path):
    path = tmp_path / "t.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = 1979-05-27T07:32:00Z\n')
    code, _, err = cli("import", "--from", "torchtitan", path, "--out", tmp_path / "s.yaml")
    assert code == 2 and said(err.strip(), path).coded == ("E-IMPORT-VALUE", "model.flavor")
    assert (
        "is 1979-05-27T07:32:00+00:00 (expected a string)" in err
        and "datetime.datetime(" not in err
    )


@pytest.mark.parametrize(
    ("key", "where", "kind"),
    [("5", "model.5", "a number"), ("~", "model.null", "null"), ("yes", "model.true", "true")],
)
def test_a_key_that_is_not_text_says_what_yaml_read(cli, write, key, where, kind):
    # pydantic's own words were `None: Keys should be strings` (no key path, nothing expected)
    path = write(f"name: x\nmodel:\n  preset: gpt2\n  {key}: 3\n")
    code, _, err = cli("validate", path)
    assert code == 2 and said(err.strip(), path).coded == ("E-VALUE", where)
    assert f"a key that is {kind}" in err and "expected a key written as text" in err
    assert err.strip().endswith("(line 4) [E-VALUE]")  # `~` had none: its text is not `null`


@pytest.mark.parametrize(
    "args",
    [
        ("inventory", "{s}", "--plot"),
        ("wear", "{s}", "--plot"),
        ("compare", "{s}", "{s}", "--emit", "megatron", "--emit-out"),
        ("import", "{s}", "--out"),
        ("measure", "--model", "gpt2", "--calibrate"),
        ("calibrate", "--out"),
        ("calibrate", "--kernels-out"),
    ],
)
def test_an_empty_output_file_is_refused_before_any_work(capsys, write, args):
    # each drew or wrote nothing without a word (exit 0), or, import's, said
    # '.: cannot write there: Device or resource busy'
    from tiersim.cli import main

    path = str(write(SMALL))
    with pytest.raises(SystemExit) as stop:
        main([a.format(s=path) for a in args] + [""])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {args[-1]}: expected a file path (got an empty one)" in err


def _args(**over) -> argparse.Namespace:
    return argparse.Namespace(**{"workers": None, "executor": "local", "scheduler": None, **over})


def test_a_sweep_starts_at_most_four_workers_a_core(monkeypatch):
    # 10,000 points and --workers 10000 started 10,000 processes of ~35 MB each; on 2 cores
    # the bound is 4 x 2 = 8
    monkeypatch.setattr("tiersim.cli.commands.sweep.default_workers", lambda: 2)
    assert workers_and_where(_args(workers=10_000), 10_000) == (
        8,
        "8 workers (--workers 10,000: no more than 4 per core of this machine's 2)",
    )
    assert workers_and_where(_args(workers=6), 10_000) == (6, "6 workers")


def test_a_plan_starts_at_most_four_workers_a_core(monkeypatch):
    monkeypatch.setattr("tiersim.plan.run.cores", lambda: 2)
    local = PlanOptions(workers=10_000)
    assert parallelism(local, 5_000) == (8, 2)  # 4 x 2 processes, 2 at a time
    # a Dask scheduler's workers are the cluster's: no bound here
    remote = PlanOptions(workers=10_000, executor="dask", scheduler="tcp://h:8786")
    assert parallelism(remote, 5_000) == (5_000, 5_000)


def test_a_resume_log_that_is_a_folder_is_not_said_missing_first(cli, tmp_path):
    # before: 'note: --resume: ... holds no sweep yet (results.jsonl); starting fresh', the
    # header, then the refusal of the same log as a folder
    from test_sweep_spec import write_sweep

    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [1, 2]}})
    (tmp_path / "o" / "results.jsonl").mkdir(parents=True)
    code, _, err = cli("sweep", path, "--out", tmp_path / "o", "--resume", "--workers", "1")
    assert code == 2 and "holds no sweep yet" not in err
    line = err.strip().splitlines()[-1]
    assert said(line, str(tmp_path / "o" / "results.jsonl")).coded == ("E-RESULTS", "")
    assert "is a folder (expected the sweep's log, a regular file)" in line


@pytest.mark.parametrize(
    ("error", "wanted", "remedy"),
    [
        (
            PermissionError(errno.EACCES, "Permission denied"),
            "a --out folder it may write in",
            "make it writable",
        ),
        (
            OSError(errno.ENOSPC, "No space left on device"),
            "room for the sweep's results in --out",
            "make room",
        ),
    ],
)
def test_a_sweep_log_it_may_not_write_is_no_want_of_room(tmp_path, error, wanted, remedy):
    # --resume into a read-only folder said 'Permission denied (expected room for the
    # sweep's results in --out)' and 'make room and rerun' (found as root without
    # CAP_DAC_OVERRIDE: setpriv --bounding-set=-dac_override; root writes anywhere)
    from tiersim.cli.commands.sweep import unwritable_out
    from tiersim.sweep.keep import OutputError

    log = tmp_path / "results.jsonl"
    first, kept = unwritable_out(tmp_path, OutputError(log, error)).problems
    assert f"(expected {wanted})" in first.message and first.code == "E-RESULTS"
    assert kept.message == f"the points in results.jsonl are kept; {remedy} and rerun with --resume"


def test_a_null_beside_a_preset_is_said_as_yaml_writes_it(cli, write):
    # `--set model.parameters=null` beside a preset read "model.parameters: None beside preset"
    path = write("name: x\nmodel: {preset: gpt2, parameters: null}\n")
    code, _, err = cli("validate", path)
    assert code == 2 and said(err.strip(), path).coded == ("E-PRESET", "model.parameters")
    assert "model.parameters: null beside preset 'gpt2'" in err and "None" not in err


def test_the_lines_of_keys_are_found_by_libyaml_where_it_reads_as_python_does():
    # a 1 MiB file of 76,000 unknown keys spent 6 s of its 15 s of CPU composing the text again
    # in pure Python for the lines of the keys its messages name; libyaml gives the same lines
    import yaml

    from tiersim.config import yamllines

    if not hasattr(yaml, "CSafeLoader"):
        pytest.skip("PyYAML built without libyaml")
    many = SMALL + "".join(f"k{i}: {i}\n" for i in range(300))
    assert yamllines._composer(many) is yaml.CSafeLoader
    pure = yaml.compose(many, Loader=yaml.SafeLoader)
    by_python = {str(k.value): k.start_mark.line + 1 for k, _ in pure.value}
    assert yamllines.key_lines(many) == {**by_python, "model.preset": 2, "training.seq_len": 3}
    assert yamllines.key_lines(many)["k299"] == 3 + 300  # SMALL's 3 lines, then k0..k299
    # deeper than libyaml's recursion may safely go, or a character the two read otherwise:
    # the pure-Python composer
    assert yamllines._composer("a: " + "[" * 300 + "]" * 300) is yaml.SafeLoader
    assert yamllines._composer("a:\n\t- 1\n") is yaml.SafeLoader


def test_a_set_key_of_thousands_of_characters_is_refused_short(cli, write):
    # quoted whole as an unknown key, 10,000 characters ran past the 2,000-character line
    # and its '(from --set ...)' was cut off
    code, _, err = cli("validate", write(SMALL), "--set", "a" * 10_000 + "=1")
    line = err.strip()
    assert code == 2 and said(line, str(write(SMALL))).coded[0] == "E-SET"
    assert line.endswith(": a key of 10,000 characters (expected at most 255) [E-SET]")
    assert len(line) < 400 and "--set aaa" in line  # the path, 80 characters of the --set
