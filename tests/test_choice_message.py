"""A key whose value is one of two lists of names (`training.precision.master`: a precision
or 'none') is refused with one list, "'a', 'b' or 'c'", not "'a' or 'b' or 'c'"; a range
and a name stay joined by "or"."""

from conftest import SCENARIOS


def test_two_lists_of_names_read_as_one(cli):
    code, _, err = cli(
        "validate", SCENARIOS / "default.yaml", "--set", "training.precision.master=fp7"
    )
    assert code == 2
    assert (
        "training.precision.master: input should be 'fp32', 'tf32', 'bf16', 'fp16', 'fp8' "
        "or 'none' (got 'fp7')"
    ) in err


def test_a_bound_and_a_name_keep_their_or(cli):
    code, _, err = cli("validate", SCENARIOS / "default.yaml", "--set", "checkpoint.every_steps=0")
    assert code == 2
    assert "checkpoint.every_steps: input should be greater than 0 or 'auto' (got 0)" in err
