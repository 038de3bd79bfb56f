"""A section given as true or false (`training.fp8: true`, as a user who reads "FP8 on" might
write it) is refused with exit 2 and a message that says what the section takes: its keys,
not "a value"."""

from conftest import SCENARIOS


def test_fp8_true_names_the_sections_keys(cli):
    code, out, err = cli("validate", SCENARIOS / "default.yaml", "--set", "training.fp8=true")
    assert code == 2 and out == ""
    assert (
        "training.fp8: expected a mapping (keys: recipe, attention, param_gather), "
        "not true or false (from --set training.fp8=true) [E-TYPE]"
    ) in err
    assert "Traceback" not in err


def test_a_number_field_still_says_a_number(cli):
    code, _, err = cli("validate", SCENARIOS / "default.yaml", "--set", "parallel.data=true")
    assert code == 2
    assert "parallel.data: expected a number, not true or false" in err
