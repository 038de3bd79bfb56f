"""The API the CLI's commands are built on (tiersim/api.py, tiersim/api_commands.py): what
each command does, as a function, and problems worded for whoever gave the overrides."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiersim import api
from tiersim.core.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = ROOT / "scenarios" / "seed-1b-adam.yaml"


def test_an_api_override_is_not_called_a_set_flag():
    with pytest.raises(InputError) as api_error:
        api.load(SCENARIO, {"bad.key": 1})
    text = str(api_error.value)
    assert "(from the override bad.key=1)" in text and "--set" not in text
    with pytest.raises(InputError) as cli_error:  # the CLI's wording, asked for
        api.load(SCENARIO, ["bad.key=1"], origin=api.SET_FLAGS)
    assert "(from --set bad.key=1)" in str(cli_error.value)
    with pytest.raises(InputError, match=r"\(from the override bad\.key=1\)"):
        api.override(api.load(SCENARIO), {"bad.key": 1})


def test_check_refuses_what_validate_refuses_and_names_the_override():
    api.check(api.load(SCENARIO))  # valid: nothing raised
    # the schema takes random writes; the wear model needs their amplification (or the
    # spare area to derive it), so validate and run refuse it: exit 2 in the CLI
    bad = api.load(SCENARIO, {"hardware.tiers.hbf.endurance.write_pattern": "random"})
    with pytest.raises(InputError) as error:
        api.check(bad)
    text = str(error.value)
    assert "hardware.tiers.hbf.endurance: random writes need 'write_amplification'" in text
    assert "(from the override hardware.tiers.hbf.endurance.write_pattern=random)" in text


def test_notes_inventory_and_model_facts():
    noted = api.load(SCENARIO, {"training.attention_kernel": "flash"})
    # seed-1b-adam's model is generic (parameters and layers): no attention for a kernel
    assert [n.path for n in api.notes(noted)] == ["training.attention_kernel"]
    assert api.notes(api.load(SCENARIO)) == []
    loaded = api.load(SCENARIO)
    inv = api.inventory(loaded)
    # 1e9 parameters: bf16 weights 2 B each, Adam's two fp32 moments 2 x 4 B each
    assert inv.per_gpu["weights"] == 1_000_000_000 * 2
    assert inv.per_gpu["optimizer"] == 1_000_000_000 * 2 * 4
    gpt2 = api.build({"name": "g", "model": {"preset": "gpt2"}})
    facts = api.model_facts(gpt2)
    # GPT-2 small (Radford et al. 2019, table 2: 12 layers, d_model 768)
    assert facts["layers"] == 12 and facts["hidden"] == 768
    assert "expert_ffn_hidden" not in facts  # dense: no experts' widths


def test_compare_lists_the_input_that_differs():
    a = api.load(SCENARIO)
    b = api.override(a, {"training.micro_batch_size": 2})
    result = api.compare(a, b, api.run(a).report, api.run(b).report)
    changed = {row["path"]: row for row in result["inputs"]}
    assert set(changed) == {"training.micro_batch_size"}
    assert changed["training.micro_batch_size"]["ratio"] == 2 / 1
    assert "cost" not in result  # neither scenario gives a price


def test_wear_of_optimizer_state_on_flash(cli, tmp_path):
    loaded = api.load(SCENARIO, {"placement.optimizer": "hbf"})
    worn = api.wear(loaded)
    hbf = worn.assessed["hbf"].wear
    # Adam's two fp32 moments of 1e9 parameters are rewritten every step: 2 x 4 B x 1e9
    assert hbf.host_bytes_by_class == {"optimizer": 2 * 4 * 1_000_000_000}
    # a step of period_s seconds, run back to back for a day of 86,400 s
    assert hbf.steps_per_day == pytest.approx(86_400 / worn.lifecycle.result.period_s)
    device, whole = api.flash_span(hbf)
    assert whole and device == hbf.physical_bytes  # levelled over all of it: the whole device
    # the CLI prints what the API returns
    code, out, _ = cli("wear", SCENARIO, "--set", "placement.optimizer=hbf", "--format", "json")
    assert code == 0
    assert json.loads(out)["wear"] == json.loads(json.dumps(worn.dicts()))


def test_run_keeps_the_trace_when_asked():
    loaded = api.load(SCENARIO)
    assert api.run(loaded, record=True).result.trace
    assert not api.run(loaded).result.trace


def test_imported_gives_the_notes_and_the_file_import_writes(cli, tmp_path):
    config = ROOT / "tests" / "fixtures" / "frameworks" / "llama3_70b.toml"
    got = api.imported(config, gpus=64, hardware="dgx-a100", name="t")
    # torchtitan's llama3 70b: 80 layers (its shipped train config, tests/fixtures/frameworks)
    assert got.loaded.scenario.name == "t" and got.loaded.scenario.model.layers == 80
    out = tmp_path / "t.yaml"
    args = ("import", config, "--gpus", 64, "--hardware", "dgx-a100", "--name", "t")
    code, _, err = cli(*args, "--out", out)
    assert code == 0 and out.read_text() == got.yaml_text()
    assert all(line in err for line in got.note_lines())
