"""What the rest of tiersim asks of an optimizer, asked of its registry entry (issue 38; no
module compares an optimizer's name: tests/test_layout.py). Expected values are the frameworks'
own spellings, read from their sources, and the messages as tiersim printed them when the
decisions were spelled by name (0.19.0), so moving them into the registry changed no byte."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from tiersim.config.load import build
from tiersim.frameworks.deepspeed import read_deepspeed
from tiersim.frameworks.megatron import read_megatron
from tiersim.frameworks.torchtitan import read_torchtitan
from tiersim.frameworks.write_deepspeed import write_deepspeed
from tiersim.frameworks.write_megatron import write_megatron
from tiersim.frameworks.write_torchtitan import write_torchtitan
from tiersim.state import optimizers
from tiersim.state.optimizer_base import Optimizer
from tiersim.state.optimizers import NAMES, REGISTRY, framework_names, fsdp2_stepped, optimizer


def _scenario(name: str, framework: str = "deepspeed", **training):
    if framework == "deepspeed":  # as DeepSpeed runs Muon (config/deepspeed.py)
        training["deepspeed"] = {"reduce_scatter": False}
    raw = {
        "name": "opt",
        "model": {"preset": "gpt2"},
        "training": {"framework": framework, "optimizer": name, **training},
        "parallel": {"data": 8, "zero_stage": 1},
        "hardware": {"preset": "dgx-h100"},
    }
    return build(raw, Path.cwd(), "opt.yaml").scenario


def _said(emitted, key: str = "training.optimizer") -> list[str]:
    return [p.message for p in emitted.notes if p.path == key]


# DeepSpeed's optimizer.type (runtime/config.py: ADAM_OPTIMIZER "adam", ADAMW_OPTIMIZER
# "adamw", LION_OPTIMIZER "lion", MUON_OPTIMIZER "muon"; torch's SGD by its class name, the
# config lower-cased before the match), as the writer spelled them before (write_deepspeed.py)
DEEPSPEED_TYPE = {"adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "lion": "Lion", "muon": "muon"}


@pytest.mark.parametrize("name", NAMES)
def test_deepspeeds_config_takes_each_optimizers_type_or_a_note(name):
    emitted = write_deepspeed(_scenario(name))
    cfg = json.loads(emitted.text)
    if name in DEEPSPEED_TYPE:
        assert cfg["optimizer"] == {"type": DEEPSPEED_TYPE[name]} and _said(emitted) == []
    else:
        assert "optimizer" not in cfg
        assert _said(emitted) == [f"{name}: no DeepSpeed optimizer type"]


def test_deepspeeds_types_import_back_and_an_unknown_one_names_them():
    for ours, theirs in DEEPSPEED_TYPE.items():
        assert framework_names("deepspeed")[theirs] == ours
        mapped = read_deepspeed({"optimizer": {"type": theirs.upper()}}, "x")
        assert mapped.values["training.optimizer"] == ours
    mapped = read_deepspeed({"optimizer": {"type": "OneBitAdam"}}, "x")
    (note,) = [p.message for p in mapped.notes if p.path == "optimizer.type"]
    assert note.endswith("not mapped (tiersim's optimizers: adam, adamw, sgd, lion, muon)")


def test_megatrons_flag_for_each_optimizer_and_what_it_runs_instead():
    """Megatron-LM's --optimizer choices are adam and sgd (arguments.py); its adam is AdamW
    (decoupled weight decay) and its sgd has momentum (--sgd-momentum 0.9)."""
    flags = {"adamw": "adam", "adam": "adam", "sgd_momentum": "sgd"}
    for name in NAMES:
        emitted = write_megatron(_scenario(name, "megatron"))
        if name in flags:
            assert f"--optimizer {flags[name]}" in emitted.text
        else:
            assert "--optimizer" not in emitted.text
            assert _said(emitted) == [f"{name}: Megatron has adam and sgd"]
    assert _said(write_megatron(_scenario("adam", "megatron"))) == [
        "adam: written as Megatron's adam, which is AdamW (decoupled weight decay)"
    ]
    assert _said(write_megatron(_scenario("adamw", "megatron"))) == []
    assert framework_names("megatron") == {"adam": "adamw", "sgd": "sgd_momentum"}
    script = "torchrun pretrain_gpt.py --optimizer sgd --num-layers 2\n"
    assert read_megatron(script, "x", False).values["training.optimizer"] == "sgd_momentum"


def test_torchtitans_optimizer_names():
    """torchtitan's [optimizer] name: Adam or AdamW (components/optimizer.py)."""
    names = {"adamw": "AdamW", "adam": "Adam"}
    for name in NAMES:
        emitted = write_torchtitan(_scenario(name, "fsdp"))
        table = tomllib.loads(emitted.text).get("optimizer")
        if name in names:
            assert table == {"name": names[name]} and _said(emitted) == []
        else:
            assert table is None
            assert _said(emitted) == [f"{name}: torchtitan's are Adam and AdamW"]
    for theirs in ("adamw", "ADAM"):
        mapped = read_torchtitan({"optimizer": {"name": theirs}}, "x", False)
        assert mapped.values["training.optimizer"] == theirs.lower()


def test_what_the_checks_ask_of_each_optimizer():
    """The CPU rates time torch's AdamW and DeepSpeed's CPU-Adam (Adam and AdamW); NeMo's
    DistributedFusedAdam is Adam or AdamW; DeepSpeed runs its Muon alone on whole matrices;
    8-bit AdamW alone keeps its state at a precision of its own."""
    with_ = {
        "cpu_rated": {"adam", "adamw"},
        "apex_distributed": {"adam", "adamw"},
        "adamw_state": {"adam", "adamw"},
        "deepspeed_whole_matrices": {"muon"},
        "own_state_precision": {"adamw8bit"},
    }
    for prop, names in with_.items():
        assert {n for n in NAMES if getattr(optimizer(n), prop)} == names, prop
    # measure --fsdp: AdamW first, as its messages list them (tests/test_muon_sharded.py)
    assert fsdp2_stepped() == ("adamw", "adam", "muon", "adamw8bit")
    assert fsdp2_stepped(adamw_state=True) == ("adamw", "adam")
    titles = {n: optimizer(n).fsdp2_title for n in fsdp2_stepped()}
    assert titles["muon"] == "Muon and AdamW" and titles["adamw"] == "AdamW"
    assert optimizer("muon").aux is REGISTRY["adamw"] and optimizers.DEFAULT == "adamw"


def test_8bit_adamws_precision_note_as_printed():
    from tiersim.config.optimizer_notes import optimizer_notes

    s = _scenario("adamw8bit", precision={"optimizer": "bf16"})
    (note,) = [p.message for p in optimizer_notes(s) if p.path == "training.precision.optimizer"]
    assert note == (
        "bf16 has no effect: adamw8bit keeps its two states in 8 bits (bitsandbytes' uint8 "
        "states with an fp32 scale a block of 256 values; a tensor under 4,096 values in "
        "fp32), whatever this says (leave it out)"
    )


def test_a_new_optimizer_is_one_entry(monkeypatch):
    """An entry alone puts an optimizer in each list the registry derives."""
    adan = Optimizer(
        "adan", 3, 20.0, None, deepspeed_type="Adan", torchtitan_name="Adan", fsdp2_step_order=9
    )
    monkeypatch.setattr(optimizers, "OPTIMIZERS", (*optimizers.OPTIMIZERS, adan))
    assert framework_names("deepspeed")["Adan"] == "adan"
    assert framework_names("torchtitan")["Adan"] == "adan"
    assert "adan" not in framework_names("megatron").values()
    assert fsdp2_stepped()[-1] == "adan" and "adan" not in fsdp2_stepped(adamw_state=True)
    # 3 moments of a 10 x 10 matrix in fp32: 3 x 100 x 4 = 1,200 B
    from tiersim.state.layers import Matrix

    assert adan.state_bytes([Matrix(10, 10)], 4) == 1_200
