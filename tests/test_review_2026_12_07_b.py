"""Findings of the second 2026-12-07 new user's review (docs/review-2026-12-07-b.md), one test
each (or a few cases of one)."""

from __future__ import annotations

FLOAT8 = """\
[model]
name = "llama3"
flavor = "8B"
converters = ["float8"]

[float8]
recipe_name = "{recipe}"
enable_fsdp_float8_all_gather = true

[training]
local_batch_size = 1
seq_len = 8192
"""


def test_an_import_problem_inside_a_built_value_is_headed_by_its_file(cli, tmp_path):
    """training.fp8 is built from [model] converters and two [float8] keys; torchao's FP8
    all-gather with rowwise scaling is refused (config/kernel_checks.py), and the refusal
    was headed `imported scenario:` naming no file nor the key it came from."""
    path = tmp_path / "tt.toml"
    path.write_text(FLOAT8.format(recipe="rowwise"))
    code, _, err = cli("import", path, "--gpus", 8, "--out", tmp_path / "s.yaml")
    assert code == 2
    assert err.startswith(f"{path}: training.fp8.param_gather: true with recipe rowwise"), err
    assert err.rstrip().endswith("(from float8.enable_fsdp_float8_all_gather) [E-CONFLICT]")
    # the same value given by --set is the user's: not said to come from the file
    code, _, err = cli(
        "import", path, "--gpus", 8, "--out", tmp_path / "s.yaml",
        "--set", "training.fp8.param_gather=true",
    )  # fmt: skip
    assert code == 2
    assert err.startswith("imported scenario: training.fp8.param_gather:") and "(from" not in err


def test_a_float8_recipe_torchtitan_does_not_take_is_refused_not_noted_as_unmodelled(cli, tmp_path):
    """torchtitan's [float8] recipe_name is Literal["tensorwise", "rowwise",
    "rowwise_with_gw_hp"] (torchtitan/config/job_config.py, Float8Linear): "bogus" was noted
    "not yet modelled by this version: training.fp8: {recipe: bogus, ...} (left out)" and the
    scenario written without FP8, exit 0."""
    path = tmp_path / "tt.toml"
    path.write_text(FLOAT8.format(recipe="bogus"))
    out = tmp_path / "s.yaml"
    code, _, err = cli("import", path, "--gpus", 8, "--out", out)
    assert code == 2 and not out.exists()
    assert err == (
        f"{path}: float8.recipe_name: is 'bogus' (expected one of tensorwise, rowwise, "
        "rowwise_with_gw_hp) [E-IMPORT-VALUE]\n"
    )
