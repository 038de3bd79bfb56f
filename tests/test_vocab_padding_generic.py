"""`training.make_vocab_size_divisible_by` and framework megatron on a generic model (a
parameter count and layers): no embedding is built, so nothing is padded, and what tiersim
prints must not say otherwise."""

GENERIC = {"parameters": 10**9, "layers": 4, "hidden": 2048, "activation_bytes_per_layer": "200 MB"}


def generic(**training) -> dict:
    return {"name": "g", "model": {**GENERIC, "vocab": 50_257}, "training": training}


def test_inventory_claims_no_padding_for_a_generic_model(write, cli):
    """The generic model keeps its 1,000,000,000 parameters whatever the vocabulary (resolve
    leaves it as it is): the inventory's first line said 'vocabulary 50,257 padded to 50,304'
    (128 x tensor 1), a padding nothing applied."""
    for training in ({"make_vocab_size_divisible_by": 128}, {"framework": "megatron"}):
        code, out, err = cli("inventory", write(generic(**training)))
        assert code == 0, err
        first = out.splitlines()[0]
        assert "1,000,000,000" in first and "padded" not in first, first


def test_the_key_on_a_generic_model_is_noted_as_having_no_effect(write, cli):
    """Given on a generic model the key changes no figure: `validate` says so (W-NO-EFFECT),
    as it does for an attention kernel there, so an unchanged figure is not taken for a
    measured non-effect; framework megatron's default alone is no note."""
    code, out, err = cli("validate", write(generic(make_vocab_size_divisible_by=128)))
    assert code == 0, err
    said = out + err
    assert "training.make_vocab_size_divisible_by: 128 has no effect" in said, said
    assert "[W-NO-EFFECT]" in said
    code, out, err = cli("validate", write(generic(framework="megatron")))
    assert "make_vocab_size_divisible_by" not in out + err


def test_a_generic_megatron_runs_scenario_file_takes_no_divisor():
    """The scenario.yaml a run writes (config/document.py) gives the divisor the run used:
    framework megatron's 128 on a transformer; a generic model pads nothing, so null there
    (128 in the file made its rerun note the key as having no effect); a given one as given."""
    from conftest import scenario

    from tiersim.config.document import scenario_document

    def written(**training):
        return scenario_document(scenario(generic(**training)))["training"]

    assert written(framework="megatron")["make_vocab_size_divisible_by"] is None
    assert written(make_vocab_size_divisible_by=64)["make_vocab_size_divisible_by"] == 64
    gpt2 = {"name": "t", "model": {"preset": "gpt2"}, "training": {"framework": "megatron"}}
    assert scenario_document(scenario(gpt2))["training"]["make_vocab_size_divisible_by"] == 128
