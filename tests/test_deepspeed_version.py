"""`training.deepspeed` (config/deepspeed.py): the DeepSpeed release, which decides how ZeRO's
gradient reduce bucket is counted, and `reduce_scatter`, which decides how the gradients are
reduced. Values checked at load (exit 2: file, key path, what was expected), resolved into
the scenario.yaml a run writes, and each rule's bytes by hand."""

from __future__ import annotations

import json

import pytest
from conftest import scenario

from tiersim.config.document import scenario_document
from tiersim.config.load import load_scenario
from tiersim.frameworks.assemble import ImportOptions, import_configs
from tiersim.frameworks.emit import emit
from tiersim.runner import report_for
from tiersim.state.resolved import resolve
from tiersim.workload.work import build_workload

GPT = {"preset": "megatron-22b"}  # 48 layers, h = 6144, vocab 51,200, tied embeddings
ZERO2_10B = "scenarios/zero-offload-10b-dgx2.yaml"


@pytest.mark.parametrize(
    "value, shown",
    [
        ("0.3", "got 0.3: write it in quotes"),  # YAML reads a number: its parts are lost
        ("v0.3.16", "got 'v0.3.16'"),
        ("'0.3'", "got '0.3'"),
        ("newest", "got 'newest'"),
    ],
)
def test_a_version_that_is_no_release_exits_2_naming_file_key_and_what_was_expected(
    cli, value, shown
):
    code, _out, err = cli("validate", ZERO2_10B, "--set", f"training.deepspeed.version={value}")
    assert code == 2
    (line,) = err.splitlines()
    assert line.startswith(f"{ZERO2_10B}: training.deepspeed.version: expected a DeepSpeed ")
    assert "MAJOR.MINOR.PATCH such as '0.3.16' or '0.16.4', or latest" in line
    assert shown in line and line.endswith("[E-VALUE]")
    assert "Traceback" not in err


def test_reduce_scatter_takes_true_or_false_only(cli):
    code, _out, err = cli("validate", ZERO2_10B, "--set", "training.deepspeed.reduce_scatter=2")
    assert code == 2
    assert "training.deepspeed.reduce_scatter: expected true or false (got 2)" in err


@pytest.mark.parametrize("value, kept", [("0.3.16", "0.3.16"), ("00.14.04", "0.14.4")])
def test_the_release_is_resolved_into_the_scenario_yaml(value, kept):
    raw = {"name": "s", "model": GPT, "training": {"framework": "deepspeed"}}
    # the release and reduce_scatter; the stage3_* keys beside them (config/deepspeed.py)
    release_keys = ("version", "reduce_scatter")
    doc = scenario_document(scenario(raw))
    written = {k: doc["training"]["deepspeed"][k] for k in release_keys}
    assert written == {"version": "latest", "reduce_scatter": True}
    raw["training"]["deepspeed"] = {"version": value, "reduce_scatter": False}
    doc = scenario_document(scenario(raw))
    written = {k: doc["training"]["deepspeed"][k] for k in release_keys}
    assert written == {"version": kept, "reduce_scatter": False}


def test_set_where_deepspeed_does_not_run_it_is_noted(cli):
    code, _out, err = cli(
        "validate", "scenarios/default.yaml", "--set", "training.deepspeed.version=0.3.0"
    )
    assert code == 0
    assert "training.deepspeed: has no effect" in err and "[W-NO-EFFECT]" in err


def _work(zero: int, reduce_scatter: bool):
    training = {"framework": "deepspeed", "deepspeed": {"reduce_scatter": reduce_scatter}}
    raw = {"name": "t", "model": GPT, "training": training}
    raw |= {"parallel": {"data": 4, "zero_stage": zero}, "hardware": {"preset": "dgx-a100"}}
    return build_workload(resolve(scenario(raw)))


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_reduce_scatter_false_all_reduces_every_gradient_bucket_whole(zero):
    # ring collectives over the 4 data-parallel ranks, per GPU: a reduce-scatter sends
    # (n-1)/n = 3/4 of the buffer, an all-reduce 2(n-1)/n = 3/2 of it: twice the bytes
    # (DeepSpeed's average_tensor / __avg_scatter_contiguous_grads with reduce_scatter false)
    scattered, whole = _work(zero, True), _work(zero, False)
    for a, b in zip(scattered.units, whole.units, strict=True):
        assert a.dp_gradients.nbytes == pytest.approx(3 / 4 * a.gradients_full)
        assert b.dp_gradients.nbytes == pytest.approx(3 / 2 * b.gradients_full)
        assert b.dp_gradients.group == "data"
    # the weights' gathers do not change
    assert [u.dp_weights for u in scattered.units] == [u.dp_weights for u in whole.units]


def test_reduce_scatter_false_is_written_to_a_deepspeed_config_and_read_back(tmp_path):
    s = load_scenario(ZERO2_10B, ["training.deepspeed.reduce_scatter=false"]).scenario
    cfg = json.loads(emit(s, "deepspeed").text)
    assert cfg["zero_optimization"]["reduce_scatter"] is False
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(cfg))
    options = ImportOptions(name="back", overrides=("model.preset=gpt2",))
    back = import_configs([path], options).loaded.scenario
    assert back.training.deepspeed.reduce_scatter is False
    # DeepSpeed's default is left to it: not written
    plain = load_scenario(ZERO2_10B).scenario
    assert "reduce_scatter" not in json.loads(emit(plain, "deepspeed").text)["zero_optimization"]


def test_reduce_scatter_false_doubles_the_gradient_bytes_on_nvlink_in_the_report():
    # zero-offload-10b-dgx2: ZeRO-2 over 16 GPUs of one DGX-2 (NVLink), 10,279,047,168 fp16
    # parameters (2P = 20,558,094,336 B), 4 micro-batches. Per GPU a step sends: ZeRO-2's
    # gradients every micro-batch and the updated parameters' all-gather once.
    # As shipped (reduce-scatter; its golden report): 4 x 15/16 x 2P + 15/16 x 2P =
    # 77,092,853,760 + 19,273,213,440 = 96,366,067,200 B. reduce_scatter false: each bucket
    # all-reduced, 2 x 15/16 of it: 4 x 30/16 x 2P + 15/16 x 2P = 154,185,707,520 +
    # 19,273,213,440 = 173,458,920,960 B
    loaded = load_scenario(ZERO2_10B, ["training.deepspeed.reduce_scatter=false"])
    links = report_for(loaded)["links"]
    assert links["nvlink"]["bytes_by_direction"] == {"data": 173_458_920_960}
