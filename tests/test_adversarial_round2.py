"""A second adversarial round (issue 35), of kinds the earlier suites (test_hostile_input,
test_robustness, test_fuzz_loaders) do not try: hostile `--set` values and huge lists of them,
absurd quantities, hostile paths (symlink loops, FIFOs, NUL bytes, binary and odd encodings)
as scenarios, presets and output folders, damaged sweep logs, disk errors mid-write, clock
jumps, hostile environment bounds and sweep files.

Each case ends as a user's mistake should (exit 2 with one short line per problem, naming the
file or option), as a result (exit 0 or 3), or as the case says, within a time bound, never
with a traceback. In-process, except where a fresh interpreter is the point.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from bounded import within
from conftest import ROOT, SCENARIOS
from test_sweep_spec import TINY, write_sweep

import tiersim.report.output as output_module
from tiersim.cli import main
from tiersim.sweep.progress import Progress, clock_text
from tiersim.sweep.store import LOG_NAME, read_log

DEFAULT = SCENARIOS / "default.yaml"
# a problem line is cut at 2,000 characters (core.errors.PROBLEM_CHARS): a 5,000-character
# path is named in full up to there; the other cases stay under 700 (an unknown key's message
# lists the keys expected)
LINE_CHARS = 2_000 + 1


@pytest.fixture
def cli(capsys):
    """conftest's `cli`, also for argparse's refusal of an option's value (its usage line and
    exit 2, raised as SystemExit)."""

    def _cli(*args: object) -> tuple[int, str, str]:
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code
        out, err = capsys.readouterr()
        return code, out, err

    return _cli


def outcome(cli, *args, codes=(2,), seconds: float = 20):
    """Run the CLI in-process within `seconds`: (exit code, stdout, stderr), the code one of
    `codes`, no traceback, every line of stderr short."""
    with within(seconds):
        code, out, err = cli(*args)
    assert code in codes, (code, err[-2000:])
    assert "Traceback" not in err, err[-2000:]
    assert all(len(line) < LINE_CHARS for line in err.splitlines()), err[:2000]
    if code == 2:
        assert err.strip(), "an input error says what is wrong"
    return code, out, err


# --- hostile --set values --------------------------------------------------------------------

HOSTILE_SETS = [
    # (the --set text, the exit code: 2 refused, 0 a valid value)
    ("=1", 2),
    ("model..layers=1", 2),
    (".model=1", 2),
    ("model.=1", 2),
    ("model", 2),
    ("model.layers", 2),
    ("model.layers=", 2),  # null: a required count
    ("[0]=1", 2),
    ("model.layers[0]=1", 2),
    ("placement.optimizer[x]=hbm", 2),
    ("model.layers[99999999999999999999]=1", 2),
    ("model.layers=!!python/object/apply:os.system ['true']", 2),  # a tag the safe loader refuses
    ("model.layers=*nowhere", 2),  # an alias without its anchor
    ("model.layers=&a [*a]", 2),  # an alias inside its own anchor
    ("model.layers={{{", 2),
    ("model.layers=[1, [2, [3]]]", 2),
    ("model.layers=\x00", 2),
    ("na\x00me=x", 2),
    ("name=\u202egnp.exe", 2),  # a right-to-left override in a results folder's name
    ("name=" + "a" * 300, 2),  # over the 255-character name bound
    ("model.layers=" + "9" * 200, 2),  # over the 100-digit integer bound
    ("model.layers=0x10", 0),  # YAML's hexadecimal: 16 layers
    ("model.layers=true", 2),
    ("training.seq_len=.inf", 2),
    ("training.optimizer=ADAM", 2),
    ("placement.optimizer=HBM", 2),
    ("hardware=null", 0),  # the default hardware
    ("hardware.tiers={}", 0),  # nothing overridden
    ("model.preset=../../../../../../etc/passwd", 2),
    ("model.preset=/dev/zero", 2),
    ("model.preset=" + "x" * 5000, 2),
    ("model.hf_config=/proc/self/environ", 2),
    ("model.layers=1e2", 2),  # YAML reads 1e2 as text: the message says to write 100
    ("training.grad_accumulation=8", 0),
]


@pytest.mark.parametrize("text, code", HOSTILE_SETS, ids=[repr(t[:40]) for t, _ in HOSTILE_SETS])
def test_a_hostile_set_value_is_refused_in_one_line(cli, text, code):
    _, _, err = outcome(cli, "validate", DEFAULT, "--set", text, codes=(code,))
    if code == 2:
        assert "\x00" not in err and "\u202e" not in err  # escaped, whatever was given


def test_two_thousand_sets_of_one_key_are_noted_once(cli):
    sets = [a for i in range(2_000) for a in ("--set", f"training.grad_accumulation={i % 8 + 1}")]
    _, _, err = outcome(cli, "validate", DEFAULT, *sets, codes=(0,))
    assert err.count("given 2000 times by --set") == 1


def test_five_hundred_unknown_set_keys_are_refused_together(cli):
    sets = [a for i in range(500) for a in ("--set", f"training.nosuch{i}=1")]
    _, _, err = outcome(cli, "validate", DEFAULT, *sets)
    # the first 30 listed, the other 500 - 30 = 470 counted (tests/test_bad_input.py)
    assert "training.nosuch0" in err and "training.nosuch29" in err
    assert "... and 470 more key paths with problems, from training.nosuch30 on" in err


def test_a_megabyte_set_value_is_refused_short(cli):
    _, _, err = outcome(cli, "validate", DEFAULT, "--set", "name=" + "x" * 2**20)
    assert len(err) < 2 * LINE_CHARS


# --- absurd quantities -----------------------------------------------------------------------

QUANTITIES = [
    # (key, value, exit code)
    ("hardware.tiers.hbf.write_bandwidth", "nan GB/s", 2),
    ("hardware.tiers.hbf.write_bandwidth", "-inf GB/s", 2),
    ("hardware.tiers.hbf.write_bandwidth", "1e309 GB/s", 2),
    ("hardware.tiers.hbf.write_bandwidth", "1e-320 GB/s", 2),
    ("hardware.tiers.hbf.write_bandwidth", "0 GB/s", 2),
    ("hardware.tiers.hbf.write_bandwidth", "-0 GB/s", 2),
    ("hardware.tiers.hbf.write_bandwidth", "100 GB/s/s", 2),
    ("hardware.tiers.hbf.write_bandwidth", "100 gb/s", 2),
    ("hardware.tiers.hbf.write_bandwidth", "½ GB/s", 2),
    ("hardware.tiers.hbf.write_bandwidth", ".nan", 2),
    ("hardware.tiers.hbf.write_bandwidth", "unlimited", 0),
    ("hardware.tiers.hbf.write_bandwidth", " 100 GB/s ", 0),
    ("hardware.tiers.hbm.capacity", "1e400 B", 2),
    ("hardware.tiers.hbm.capacity", "NaN TB", 2),
    ("hardware.tiers.hbm.capacity", "0x10 GB", 2),
    ("hardware.tiers.hbm.capacity", "GB", 2),
    ("hardware.tiers.hbf.latency", "1e300 s", 2),  # found: NaN figures (now: at most 1 h)
    ("hardware.tiers.hbf.latency", "2 h", 2),
    ("hardware.tiers.hbf.latency", "59 min", 0),
    ("hardware.network.inter_node_latency", "1e300 s", 2),
    ("budget.hbf.lifetime", "1e-300 s", 2),  # found: an infinite allowed rate (now >= 1 s)
    ("budget.hbf.lifetime", "0.5 s", 2),
    ("budget.hbf.lifetime", "1e300 years", 0),
    ("failures.mtbf", "1e-300 s", 2),
    ("training.workspace", "-1e-300 B", 2),
    ("model.layers", "1e20", 2),
    ("training.micro_batch_size", "0", 2),
    ("training.micro_batch_size", "-1", 2),
    ("training.micro_batch_size", "2.5", 2),
]


@pytest.mark.parametrize("key, value, code", QUANTITIES, ids=[f"{k}={v}" for k, v, _ in QUANTITIES])
def test_an_absurd_quantity_is_refused_or_read(cli, key, value, code):
    outcome(cli, "validate", DEFAULT, "--set", f"{key}={value}", codes=(code,))


@pytest.mark.parametrize(
    "sets",
    [
        ["hardware.tiers.hbf.latency=59 min"],
        ["budget.hbf.lifetime=1 s"],
        ["budget.hbf.lifetime=1e300 years"],
        ["failures.mtbf=1 s"],
        ["hardware.tiers.hbf.write_bandwidth=1 B/s", "training.grad_accumulation=1"],
        ["checkpoint.every_steps=1000000000000"],
        ["hardware.tiers.hbf.capacity=1e30 B"],
    ],
    ids=lambda s: " ".join(s),
)
def test_extreme_but_valid_values_give_a_sound_report_or_a_named_refusal(cli, tmp_path, sets):
    """Run to the end: a report whose every figure passes the invariant check (no NaN, no
    negative figure, no port over its bandwidth), or exit 3 saying why it cannot run."""
    args = [a for s in sets for a in ("--set", s)]
    code, out, _ = outcome(
        cli, "run", DEFAULT, "--format", "json", "--out", tmp_path / "o", *args, codes=(0, 3)
    )
    if code == 0:
        json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the report"))


# --- hostile paths as the scenario ------------------------------------------------------------


def _path_case(tmp: Path, kind: str) -> str:
    if kind == "symlink loop":
        (tmp / "a.yaml").symlink_to(tmp / "b.yaml")
        (tmp / "b.yaml").symlink_to(tmp / "a.yaml")
        return str(tmp / "a.yaml")
    if kind == "dangling symlink":
        (tmp / "d.yaml").symlink_to(tmp / "nowhere.yaml")
        return str(tmp / "d.yaml")
    if kind == "a folder":
        (tmp / "f.yaml").mkdir()
        return str(tmp / "f.yaml")
    if kind == "a newline in its name":
        path = tmp / "new\nline.yaml"
        path.write_text("name: [")
        return str(path)
    if kind == "a 5000-character name":
        return str(tmp / ("x" * 5000 + ".yaml"))
    if kind == "a NUL byte in its name":
        return str(tmp / "a\x00b.yaml")
    if kind == "an empty path":
        return ""
    if kind == "a path through a file":
        (tmp / "file").write_text("x")
        return str(tmp / "file" / "s.yaml")
    raise AssertionError(kind)


PATHS = [
    "symlink loop",
    "dangling symlink",
    "a folder",
    "a newline in its name",
    "a 5000-character name",
    "a NUL byte in its name",
    "an empty path",
    "a path through a file",
]


@pytest.mark.parametrize("kind", PATHS)
@pytest.mark.parametrize("command", ["validate", "run", "inventory"])
def test_a_hostile_path_as_the_scenario_is_refused(cli, tmp_path, kind, command):
    path = _path_case(tmp_path, kind)
    _, _, err = outcome(cli, command, path)
    assert "\x00" not in err and err.count("\n") <= 3


CONTENTS = [
    # (what, the file's bytes, exit code)
    ("PNG bytes", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)), 2),
    ("UTF-16 with its BOM", "name: x\n".encode("utf-16"), 2),
    ("NUL bytes in YAML", b"name: a\x00b\nmodel: {preset: gpt2}\n", 2),
    ("only comments", b"# nothing\n# here\n", 2),
    ("two documents", b"name: a\nmodel: {preset: gpt2}\n---\nname: b\n", 2),
    ("tab indentation", b"model:\n\tpreset: gpt2\n", 2),
    ("a lone surrogate escape", b'name: "\\ud800"\nmodel: {preset: gpt2}\n', 2),
    ("a 900 kB key", b"x" * 900_000 + b": 1\n", 2),
    ("a 900 kB comment line", b"#" + b"x" * 900_000 + b"\nname: a\nmodel: {preset: gpt2}\n", 0),
    ("CRLF line ends", b"name: crlf\r\nmodel: {preset: gpt2}\r\n", 0),
    ("a UTF-8 BOM", "\ufeffname: bom\nmodel: {preset: gpt2}\n".encode(), 0),
    ("a document end marker", b"name: end\nmodel: {preset: gpt2}\n...\n", 0),
]


@pytest.mark.parametrize("what, data, code", CONTENTS, ids=[c[0] for c in CONTENTS])
def test_odd_file_contents_are_read_or_refused(cli, tmp_path, what, data, code):
    path = tmp_path / "s.yaml"
    path.write_bytes(data)
    outcome(cli, "validate", path, codes=(code,))


# --- hostile presets ---------------------------------------------------------------------------


def _preset_case(tmp: Path, kind: str) -> str:
    if kind == "itself":
        return "./s.yaml"
    if kind in ("symlink loop", "a folder", "dangling symlink"):
        return _path_case(tmp, kind)
    if kind == "binary":
        (tmp / "bin.yaml").write_bytes(bytes(range(256)) * 4)
        return str(tmp / "bin.yaml")
    if kind == "empty":
        (tmp / "empty.yaml").write_text("")
        return str(tmp / "empty.yaml")
    if kind == "a list":
        (tmp / "list.yaml").write_text("- 1\n- 2\n")
        return str(tmp / "list.yaml")
    if kind == "a sweep file":
        (tmp / "sw.yaml").write_text("base: s.yaml\ngrid: {model.layers: [1, 2]}\n")
        return str(tmp / "sw.yaml")
    if kind == "a chain of two naming each other":
        (tmp / "p1.yaml").write_text("preset: ./p2.yaml\n")
        (tmp / "p2.yaml").write_text("preset: ./p1.yaml\n")
        return str(tmp / "p1.yaml")
    if kind == "a name with a NUL byte":
        return "gpt\x002"
    raise AssertionError(kind)


PRESETS = [
    "itself",
    "symlink loop",
    "a folder",
    "dangling symlink",
    "binary",
    "empty",
    "a list",
    "a sweep file",
    "a chain of two naming each other",
    "a name with a NUL byte",
]


@pytest.mark.parametrize("kind", PRESETS)
@pytest.mark.parametrize("section", ["model", "hardware"])
def test_a_hostile_preset_is_refused(cli, tmp_path, kind, section):
    raw = {
        "name": "p",
        "model": {"preset": "gpt2"},
        section: {"preset": _preset_case(tmp_path, kind)},
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    _, _, err = outcome(cli, "validate", path)
    assert err.startswith(str(path)) and f"{section}" in err


# --- hostile output folders --------------------------------------------------------------------


def _out_case(tmp: Path, kind: str) -> str:
    if kind == "a FIFO":
        os.mkfifo(tmp / "fifo")
        return str(tmp / "fifo")
    if kind == "/dev/null":
        return "/dev/null"
    if kind == "under /proc":
        return "/proc/tiersim-results"
    return _path_case(tmp, kind)


OUTS = [
    "symlink loop",
    "a FIFO",
    "/dev/null",
    "under /proc",
    "a path through a file",
    "a 5000-character name",
    "a NUL byte in its name",
]


@pytest.mark.parametrize("kind", OUTS)
def test_a_hostile_out_folder_is_refused_before_simulating(cli, tmp_path, kind):
    _, _, err = outcome(cli, "run", DEFAULT, "--out", _out_case(tmp_path, kind))
    assert "--out" in err.splitlines()[-1] and "\x00" not in err


@pytest.mark.parametrize("kind", OUTS)
def test_a_hostile_out_folder_of_a_sweep_is_refused_before_any_point(cli, tmp_path, kind):
    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [1, 2]}})
    _, _, err = outcome(cli, "sweep", path, "--out", _out_case(tmp_path, kind), "--no-plots")
    assert "--out" in err.splitlines()[-1] and "\x00" not in err


@pytest.mark.parametrize("kind", ["a FIFO", "a folder", "a NUL byte in its name", "symlink loop"])
def test_a_hostile_trace_path_is_refused(cli, tmp_path, kind):
    trace = _out_case(tmp_path, kind) if kind != "a folder" else str(tmp_path)
    _, _, err = outcome(cli, "run", DEFAULT, "--out", tmp_path / "o", "--trace", trace)
    assert err.startswith("--trace")


# --- disk errors mid-write ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "number",
    [errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG],
    ids=errno.errorcode.get,
)
@pytest.mark.parametrize("failing", [1, 2], ids=["scenario.yaml", "report.json"])
def test_a_disk_error_mid_write_leaves_no_mismatched_results(
    cli, tmp_path, monkeypatch, number, failing
):
    """The disk fails at the first or second file a run writes: exit 2 naming the error, no
    temporary file left, and never a new scenario.yaml beside an old report.json."""
    out = tmp_path / "o"
    assert cli("run", DEFAULT, "--out", out)[0] == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real, calls = os.fsync, []

    def failing_fsync(fd):
        calls.append(fd)
        if len(calls) == failing:
            raise OSError(number, os.strerror(number))
        return real(fd)

    monkeypatch.setattr(output_module.os, "fsync", failing_fsync)
    _, _, err = outcome(cli, "run", DEFAULT, "--out", out, "--set", "training.grad_accumulation=8")
    assert os.strerror(number) in err
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after == before, "the earlier run's files, both, untouched"


# --- damaged sweep logs ------------------------------------------------------------------------

GOOD = {"key": "k", "status": "ok", "error": None, "outputs": {}, "elapsed_s": 0.1}
DAMAGED_LINES = [
    b"[]",
    b"1",
    b'"k"',
    b"null",
    json.dumps({**GOOD, "key": 1}).encode(),
    json.dumps({**GOOD, "key": ["k"]}).encode(),
    json.dumps({k: v for k, v in GOOD.items() if k != "outputs"}).encode(),
    json.dumps({**GOOD, "status": 42}).encode(),
    json.dumps({**GOOD, "status": "weird"}).encode(),
    json.dumps({**GOOD, "outputs": "x"}).encode(),
    json.dumps({**GOOD, "error": 5}).encode(),
    json.dumps({**GOOD, "values": [1]}).encode(),
    b'{"key": "k", "status": "ok", \x00}',
    b"\xff\xfe\xfd",
    b"{" * 100_000,
    b"[" * 100_000 + b"]" * 100_000,
]


@pytest.mark.parametrize("line", DAMAGED_LINES, ids=lambda b: repr(b[:30]))
def test_a_damaged_log_line_is_counted_unreadable_beside_good_ones(tmp_path, line):
    log = tmp_path / LOG_NAME
    good = json.dumps({**GOOD, "key": "good"}).encode()
    log.write_bytes(good + b"\n" + line + b"\n" + good.replace(b"good", b"also") + b"\n")
    entries, skipped, intact = read_log(log)
    assert sorted(entries) == ["also", "good"] and skipped == 1
    assert intact == log.stat().st_size


def test_a_real_point_whose_line_lost_its_outputs_is_run_again(cli, tmp_path):
    path = write_sweep(tmp_path, {"grid": {"training.grad_accumulation": [1, 2]}})
    out = tmp_path / "out"
    outcome(cli, "sweep", path, "--out", out, "--workers", "1", "--no-plots", codes=(0,))
    lines = (out / LOG_NAME).read_bytes().splitlines()
    damaged = json.loads(lines[0])
    del damaged["outputs"]
    (out / LOG_NAME).write_bytes(json.dumps(damaged).encode() + b"\n" + lines[1] + b"\n")
    _, stdout, err = outcome(cli, "sweep", path, "--out", out, "--resume", "--no-plots", codes=(0,))
    assert "1 unreadable line(s)" in err and "resumed: 1 points reused" in stdout


# --- clock jumps --------------------------------------------------------------------------------


@pytest.mark.parametrize("now", [0.0, -1e9, 4e12], ids=["epoch", "before 1940", "year 128,000"])
def test_a_wall_clock_jump_changes_no_figure(cli, tmp_path, monkeypatch, now):
    assert cli("run", DEFAULT, "--out", tmp_path / "a")[0] == 0
    monkeypatch.setattr(time, "time", lambda: now)
    monkeypatch.setattr(time, "time_ns", lambda: int(now * 1e9))
    assert cli("run", DEFAULT, "--out", tmp_path / "b")[0] == 0
    for name in ("report.json", "scenario.yaml"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_progress_line_never_shows_a_negative_time():
    bar = Progress(10, stream=open(os.devnull, "w"))  # noqa: SIM115
    bar.done = 3
    line = bar.line(bar.start - 3_600)  # the clock read an hour before the bar began
    assert "elapsed 0:00" in line, line
    assert clock_text(-5) == "0:00" and clock_text(float("nan")) == "--:--"


# --- hostile environment bounds ----------------------------------------------------------------


@pytest.mark.parametrize(
    "variable, value",
    [
        ("TIERSIM_MAX_YAML_BYTES", "-1"),
        ("TIERSIM_MAX_YAML_BYTES", "0"),
        ("TIERSIM_MAX_YAML_BYTES", "lots"),
        ("TIERSIM_MAX_YAML_BYTES", ""),
        ("TIERSIM_MAX_YAML_BYTES", "9" * 50),
        ("TIERSIM_MAX_YAML_BYTES", "0x10"),
        ("TIERSIM_MAX_YAML_BYTES", "1e6"),
        ("TIERSIM_MAX_NESTING", "201"),
        ("TIERSIM_MAX_NESTING", "\x00"),
        ("TIERSIM_MAX_YAML_NODES", "-5"),
    ],
)
def test_a_hostile_bound_in_the_environment_is_named(cli, monkeypatch, variable, value):
    monkeypatch.setenv(variable, value) if "\x00" not in value else monkeypatch.setattr(
        os, "environ", {**os.environ, variable: value}
    )
    _, _, err = outcome(cli, "validate", DEFAULT)
    assert err.startswith(variable)


# --- hostile sweep files -----------------------------------------------------------------------

SWEEPS = [
    ("max_points 0", {"max_points": 0, "grid": {"training.grad_accumulation": [1, 2]}}),
    ("max_points -1", {"max_points": -1, "grid": {"training.grad_accumulation": [1, 2]}}),
    ("max_points text", {"max_points": "many", "grid": {"training.grad_accumulation": [1, 2]}}),
    ("max_points true", {"max_points": True, "grid": {"training.grad_accumulation": [1, 2]}}),
    ("an empty grid list", {"grid": {"training.grad_accumulation": []}}),
    ("10,001 values", {"grid": {"training.grad_accumulation": list(range(1, 10_002))}}),
    ("zip lengths differ", {"zip": {"training.grad_accumulation": [1, 2], "model.layers": [1]}}),
    ("an empty key path", {"grid": {"": [1, 2]}}),
    ("a key path into nothing", {"grid": {"nosuch.section.key": [1, 2]}}),
    ("a grid that is a list", {"grid": [1, 2]}),
    ("a name with a slash", {"name": "../../escape", "grid": {"training.grad_accumulation": [1]}}),
]


@pytest.mark.parametrize("what, sweep", SWEEPS, ids=[w for w, _ in SWEEPS])
def test_a_hostile_sweep_file_is_refused(cli, tmp_path, what, sweep):
    path = write_sweep(tmp_path, sweep)
    outcome(cli, "validate", path)


def test_a_sweep_whose_base_is_the_sweep_itself_is_refused(cli, tmp_path):
    path = tmp_path / "self.yaml"
    path.write_text("base: self.yaml\ngrid: {training.grad_accumulation: [1, 2]}\n")
    outcome(cli, "validate", path)


# --- names the terminal cannot show ------------------------------------------------------------


def test_a_file_name_that_is_not_utf8_is_printed_escaped(tmp_path):
    name = os.fsencode(str(tmp_path)) + b"/caf\xe9.yaml"  # Latin-1 bytes: not UTF-8
    with open(name, "wb") as f:
        f.write(yaml.safe_dump(TINY).encode())
    code = (
        "import os, sys\nfrom tiersim.cli import main\n"
        f"sys.exit(main(['validate', os.fsdecode({name!r})]))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=env, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"caf\\udce9.yaml: valid scenario" in done.stdout
