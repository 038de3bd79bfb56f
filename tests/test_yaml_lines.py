"""Problems with a scenario file end with the line their key is written on (`tiersim run`,
`validate`, `inventory` alike); a problem from `--set` does not; a hostile file costs no more."""

from __future__ import annotations

import contextlib
import io
import re

from tiersim.cli import main
from tiersim.config.yamllines import key_lines

BAD = """name: x
model: {preset: gpt2}
training:
  micro_batch_sise: 2
  seq_len: -5
hardware:
  tiers:
    hbm: {bandwidth: 50 GB}
"""


CODE = re.compile(r" \[[EW]-[A-Z-]+\]$", re.MULTILINE)


def _err(*args: object) -> tuple[int, str]:
    """(exit code, stderr with each problem's code taken off: what is checked here is where
    the line number goes, which is before the code; each line is checked to end with one)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    text = err.getvalue()
    assert all(CODE.search(line) for line in text.splitlines()), text
    return code, CODE.sub("", text)


def test_each_problem_names_the_line_of_its_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    for command in ("run", "validate", "inventory"):
        code, err = _err(command, path)
        assert code == 2, err
        lines = err.strip().splitlines()
        # lines 4, 5 and 8 of BAD, counted from 1
        assert any(x.startswith(f"{path}: training.micro_batch_sise: ") for x in lines)
        assert [x.rsplit(" (line ", 1)[1] for x in sorted(lines)] == ["8)", "4)", "5)"]


def test_a_problem_from_set_has_no_line(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("name: x\nmodel: {preset: gpt2}\ntraining:\n  seq_len: 512\n")
    code, err = _err("validate", path, "--set", "training.seq_len=0")
    assert code == 2 and "(from --set" in err and "(line " not in err


def test_key_lines_do_not_follow_aliases():
    # nine levels of nine aliases ("billion laughs"): each node is visited once
    text = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 10)
    )
    lines = key_lines(text)
    assert lines["a9"] == 10 and lines["a0.8"] == 1
    assert len(lines) < 200  # not 9 ** 9


BASE = "name: b\nmodel: {preset: gpt2}\ntraining: {seq_len: 512}\n"
SWEEP_BAD = """name: s
base: base.yaml
grid:
  training.micro_batch_sise: [1, 2]
  parallel.data: [1, 1]
zip:
  training.seq_len: [256, 512]
  training.grad_accumulation: [1]
"""


def test_each_problem_of_a_sweep_file_names_the_line_of_its_key(tmp_path):
    (tmp_path / "base.yaml").write_text(BASE)
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP_BAD)
    for command in ("validate", "sweep"):
        code, err = _err(command, path, *(["--out", tmp_path / "o"] if command == "sweep" else []))
        assert code == 2, err
        lines = sorted(err.strip().splitlines(), key=lambda x: x.split(": ")[1])
        assert len(lines) == 3, err
        # lines 5, 4 and 6 of SWEEP_BAD, counted from 1
        assert lines[0].startswith(f"{path}: grid.parallel.data: value 1 is listed twice")
        assert lines[0].endswith(" (line 5)")
        assert lines[1].startswith(f"{path}: grid.training.micro_batch_sise: not a scenario key")
        assert lines[1].endswith(" (line 4)")
        assert lines[2].startswith(f"{path}: zip: lists must have equal lengths")
        assert lines[2].endswith(" (line 6)")
    assert not (tmp_path / "o").exists()


def test_a_swept_value_wrong_on_its_own_names_its_line_in_validate_and_sweep(tmp_path):
    (tmp_path / "base.yaml").write_text(BASE)
    path = tmp_path / "s.yaml"
    # a size where a bandwidth is expected, on line 4
    path.write_text(
        "base: base.yaml\ngrid:\n  parallel.data: [1, 2]\n"
        "  hardware.tiers.hbm.bandwidth: [50 GB/s, 50 GB]\n"
    )
    for command in ("validate", "sweep"):
        code, err = _err(command, path, *(["--out", tmp_path / "o"] if command == "sweep" else []))
        assert code == 2, err
        (line,) = err.strip().splitlines()
        # the message says the value first itself: not prefixed "value '50 GB':" again
        assert line.startswith(f"{path}: grid.hardware.tiers.hbm.bandwidth: '50 GB' is a size")
        assert line.endswith(" (line 4)")


def test_a_problem_of_a_sweeps_base_scenario_has_no_line_of_the_sweep_file(tmp_path):
    # the wrong name is in base.yaml; the sweep file's own `name:` (line 1) is not where it is
    (tmp_path / "base.yaml").write_text("name: ../x\nmodel: {preset: gpt2}\n")
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nbase: base.yaml\ngrid: {parallel.data: [1, 2]}\n")
    code, err = _err("validate", path)
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"{path}: name: ")
    assert f"(base scenario {tmp_path / 'base.yaml'})" in line and "(line " not in line


def test_problems_found_once_the_scenario_is_built_name_their_line_too(tmp_path):
    # the failure model's two rates: found by the checkpoint model's checks, after the schema
    path = tmp_path / "f.yaml"
    path.write_text(
        "name: x\nmodel: {preset: gpt2}\nfailures:\n  mtbf: 3 h\n  gpu_mtbf: 5 h\n"
        "hardware: {preset: h200-hbf}\n"
    )
    for command in ("validate", "run", "wear"):
        args = ["--out", tmp_path / "o"] if command == "run" else []
        code, err = _err(command, path, *args)
        assert code == 2, err
        # `failures:` is on line 3
        assert err == f"{path}: failures: give mtbf (the job's) or gpu_mtbf, not both (line 3)\n"


def test_a_plan_sections_problems_name_their_lines_in_validate_and_plan(tmp_path):
    path = tmp_path / "p.yaml"
    # the misspelt key path is on line 4
    path.write_text(
        "name: x\nmodel: {preset: gpt2}\nplan:\n  placement.optimizr: [hbm, dram]\n"
        "hardware: {preset: h200-hbf}\n"
    )
    for command in ("validate", "plan"):
        code, err = _err(command, path)
        assert code == 2, err
        (line,) = err.strip().splitlines()
        assert line.startswith(f"{path}: plan.placement.optimizr: unknown key 'optimizr' in ")
        assert line.endswith(" (line 4)")


def test_a_references_files_problems_name_their_lines(tmp_path):
    (tmp_path / "a.yaml").write_text("name: a\nmodel: {preset: gpt2}\n")
    (tmp_path / "references.yaml").write_text(
        "# runs\na.yaml:\n  iteration_time_s: -1\n  derived: false\n  source: x\n  extra: 1\n"
    )
    code, err = _err("check-published", "--folder", tmp_path)
    assert code == 2, err
    refs = tmp_path / "references.yaml"
    assert err.splitlines() == [  # lines 3 and 6 of the file
        f"{refs}: a.yaml.extra: unknown key 'extra' (expected one of: calibrates, derived, fit, "
        "iteration_time_s, metric, notes, source, tflops_per_gpu, unfitted) (line 6)",
        f"{refs}: a.yaml.iteration_time_s: must be > 0 (got -1) (line 3)",
    ]


def test_a_key_written_in_a_preset_file_names_that_file_and_its_line(tmp_path):
    (tmp_path / "model.yaml").write_text("layers: 2\nhiden: 64\nheads: 2\nvocab: 100\n")
    hardware = (
        "gpu: {name: x, peak_flops: {bf16: 100 TFLOP/s}, efficiency: 0.5}\ntiers:\n"
        "  hbm: {kind: hbm, capacity: 80 GB, bandwidth: 2 TB/s}\n"
        "  dram: {kind: dramm, capacity: 80 GB, bandwidth: 2 TB/s}\n"
    )
    (tmp_path / "hw.yaml").write_text(hardware)
    path = tmp_path / "s.yaml"
    path.write_text("name: x\nmodel: {preset: model.yaml}\nhardware: {preset: hw.yaml}\n")
    code, err = _err("validate", path)
    assert code == 2, err
    lines = sorted(err.strip().splitlines())
    assert len(lines) == 2, err
    # the tier's kind is on line 4 of hw.yaml, the misspelt key on line 2 of model.yaml
    assert lines[0].startswith(f"{path}: hardware.tiers.dram.kind: ")
    assert lines[0].endswith(f" ({tmp_path / 'hw.yaml'}, line 4)")
    assert lines[1].startswith(f"{path}: model.hiden: unknown key 'hiden'")
    assert lines[1].endswith(f" ({tmp_path / 'model.yaml'}, line 2)")
    # the scenario's own key, over the preset's, is where the scenario writes it (line 5)
    path.write_text(
        "name: x\nmodel: {preset: gpt2}\nhardware:\n  preset: hw.yaml\n  tiers: {dram: {kind: x}}\n"
    )
    code, err = _err("validate", path)
    assert code == 2 and err.rstrip().endswith("(got 'x') (line 5)"), err
