"""The scenario a run writes out: every value with its unit, read back to the same scenario."""

from __future__ import annotations

import json
import math
import random
import re
import struct

import pytest
import yaml
from conftest import SCENARIOS, scenario

from tiersim.cli import main
from tiersim.config.document import SOURCES, scenario_document
from tiersim.config.framework import offload_plan, resolved_prefetch_depth
from tiersim.config.framework_attention import resolved_flash_kernel
from tiersim.config.framework_parallel import resolved_parallel
from tiersim.config.kernel_workspace import resolved_workspace
from tiersim.config.load import build, load_scenario
from tiersim.config.vocab_padding import vocab_divisor
from tiersim.core.units import Kind, fmt_exact, parse
from tiersim.report.output import scenario_yaml

SHIPPED = sorted(
    p
    for p in [*SCENARIOS.glob("*.yaml"), *(SCENARIOS / "published").glob("*.yaml")]
    if p.name != "references.yaml"
)


@pytest.mark.parametrize(
    ("value", "kind", "text"),
    [
        (60 * 1e-6, Kind.TIME, "60 us"),  # as the parser computes it (60e-6 is '60000 ns')
        (2**30, Kind.SIZE, "1 GiB"),
        (141e9, Kind.SIZE, "141 GB"),
        (50e9, Kind.BANDWIDTH, "50 GB/s"),  # not '0.05 TB/s': a number of at least 1 first
        (5 * 365 * 86400.0, Kind.TIME, "5 years"),
        (300.0, Kind.TIME, "5 min"),
        (989e12, Kind.FLOP_RATE, "989 TFLOP/s"),
        (1.4e9, Kind.PARAM_RATE, "1.4 Gparam/s"),
        (0.0, Kind.SIZE, "0 B"),
        (math.inf, Kind.BANDWIDTH, "unlimited"),
        (0.5 * 1e-6, Kind.TIME, "0.5 us"),  # not '499.99999999999994 ns': fewest digits first
        (400e9 / 8, Kind.BANDWIDTH, "50 GB/s"),  # 400 Gb/s
        (7 * 86400.0, Kind.TIME, "1 week"),
    ],
)
def test_quantities_are_written_in_the_plainest_unit_that_reads_back_exactly(value, kind, text):
    assert fmt_exact(value, kind) == text
    if text != "unlimited":
        assert parse(text, kind) == value


def test_any_float_reads_back_exactly():
    rng = random.Random(20261129)
    values = [123456789.123, 1 / 3, 7.3e-7, 2.0**53 + 2, 1e-300, 5e-324, 1.7e308]
    values += [
        abs(struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0]) for _ in range(500)
    ]
    for value in (v for v in values if math.isfinite(v)):
        for kind in Kind:
            assert parse(fmt_exact(value, kind), kind) == value, (value, kind)


def _without_sources(s) -> dict:
    dump = s.model_dump()
    dump["training"]["seq_len"] = s.seq_len  # written resolved
    dump["training"]["flash_kernel"] = resolved_flash_kernel(s)  # the framework's, on the GPU
    dump["training"]["make_vocab_size_divisible_by"] = vocab_divisor(s)  # megatron's 128
    dump["training"]["workspace"] = resolved_workspace(s)  # the stack's kernel workspaces
    if s.training.framework is not None:  # written resolved: the framework's defaults
        dump["training"]["offload"] = offload_plan(s)
    dump["parallel"] = resolved_parallel(s).model_dump()  # the overlap keys written resolved
    dump["simulation"]["prefetch_depth"] = resolved_prefetch_depth(s)  # and the prefetch depth
    for section, key in SOURCES:
        dump[section].pop(key)
    return dump


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_scenario_reads_back_from_its_document(path, tmp_path):
    s = load_scenario(path).scenario
    text = yaml.safe_dump(scenario_document(s), sort_keys=False)
    assert not re.search(r"\d[eE][-+]?\d", text)  # units, not exponents
    back = build(yaml.safe_load(text), tmp_path, "document").scenario
    assert _without_sources(back) == _without_sources(s)
    assert back.hardware.preset is None  # 'none': nothing merged under the written values


def test_a_runs_scenario_file_reruns_to_the_same_report(tmp_path, capsys):
    path = SCENARIOS / "hbf-optimizer-state.yaml"
    first, again = tmp_path / "first", tmp_path / "again"
    # on 8 of its 80 layers: each run simulates HBF's wear remedy (2 s of CPU on 80 layers)
    fewer = ["--set", "model.layers=8"]
    assert main(["run", str(path), "--out", str(first), "--format", "json", *fewer]) == 0
    report = json.loads(capsys.readouterr().out)
    written = (first / "scenario.yaml").read_text()
    assert written.startswith("# The scenario as tiersim")
    assert "# model.preset: llama-3-70b\n# hardware.preset: h200-hbf-8stack\n" in written
    assert "workspace: 64 MiB" in written and "warmup_steps: 1" in written  # defaults too (the
    # workspace: PyTorch's two 32 MiB cuBLAS workspaces on an H200, docs/kernel-workspace.md)
    assert "layers: 8" in written  # the --set, written in
    assert main(["run", str(first / "scenario.yaml"), "--out", str(again), "--format", "json"]) == 0
    rerun = json.loads(capsys.readouterr().out)
    assert rerun == report
    assert (again / "report.json").read_bytes() == (first / "report.json").read_bytes()


def test_a_framework_scenario_is_written_with_the_offload_it_resolved_to():
    # DeepSpeed's defaults (deepspeed/runtime/zero/config.py, offload_config.py), written
    # out where the scenario left them to the framework; a key it gave stays as given
    s = load_scenario(SCENARIOS / "zero-infinity-1t-dgx2.yaml").scenario
    offload = scenario_document(s)["training"]["offload"]
    assert offload["fetch"] == "submodule"
    assert offload["prefetch_bucket_size"] == 50_000_000  # stage3_prefetch_bucket_size
    assert offload["max_live_parameters"] == 1_000_000_000  # stage3_max_live_parameters
    assert offload["sub_group_size"] == 1_000_000_000
    assert offload["buffer_count"] == 4
    assert offload["pipeline_read"] is False and offload["pipeline_write"] is False
    assert offload["boundary_gradients"] == "fp32" and offload["swap_gradients"] is True
    assert offload["overlap_comm"] is True  # on at ZeRO-3 (zero/config.py overlap_comm_valid)
    zero2 = load_scenario(SCENARIOS / "zero-offload-10b-dgx2.yaml").scenario
    assert scenario_document(zero2)["training"]["offload"]["overlap_comm"] is False
    given = load_scenario(
        SCENARIOS / "zero-infinity-1t-dgx2.yaml", ["training.offload.buffer_count=2"]
    ).scenario
    assert scenario_document(given)["training"]["offload"]["buffer_count"] == 2
    # FSDP2 has no swap buffers, tiles or buckets: null there, not a made-up count
    fsdp = load_scenario(SCENARIOS / "fsdp2-cpu-offload-llama2-7b.yaml").scenario
    offload = scenario_document(fsdp)["training"]["offload"]
    assert offload["pin_memory"] is True and offload["fetch"] == "layer"
    assert offload["buffer_count"] is None and offload["sub_group_size"] is None


def test_a_line_break_in_the_source_path_stays_inside_the_comment():
    s = load_scenario(SCENARIOS / "seed-1b-adam.yaml").scenario
    text = scenario_yaml(s, "odd\nname: injected\n.yaml")
    assert yaml.safe_load(text) == yaml.safe_load(yaml.safe_dump(scenario_document(s)))
    assert "odd\\nname: injected\\n.yaml" in text.splitlines()[0]


def test_a_written_budget_takes_the_documented_set_paths(tmp_path):
    # budget.<tier> beside steps_per_day, as a user writes it, so --set budget.hbf.x applies
    s = load_scenario(SCENARIOS / "default.yaml").scenario
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario_yaml(s, "default.yaml"))
    assert "budget:\n  steps_per_day: null\n  hbf:\n" in path.read_text()
    again = load_scenario(path, ["budget.hbf.lifetime=3 years"]).scenario
    assert again.budget.tiers["hbf"].lifetime == 3 * 365 * 86400
    swapped = load_scenario(
        path, ["budget.hbf.lifetime=null", "budget.hbf.drive_writes_per_day=2"]
    ).scenario
    assert swapped.budget.tiers["hbf"].drive_writes_per_day == 2


def test_budget_tiers_given_both_ways_merge_key_by_key():

    budget = {
        "tiers": {"hbf": {"lifetime": "5 years"}, "nvme": {"drive_writes_per_day": 1}},
        "hbf": {"lifetime": None, "drive_writes_per_day": 3},
    }
    tiers = scenario({"name": "b", "model": {"preset": "gpt2"}, "budget": budget}).budget.tiers
    assert tiers["hbf"].lifetime is None and tiers["hbf"].drive_writes_per_day == 3
    assert tiers["nvme"].drive_writes_per_day == 1


GPT2 = "name: g\nmodel: {preset: gpt2}\nhardware: {preset: dgx-h100}\ntraining:\n  seq_len: 1024\n"


@pytest.mark.parametrize(
    ("text", "written"),
    [
        # megatron's default attention is eager (Korthikanti et al.'s op-by-op core), timed
        # kernel by kernel for a dense GPT-2: written so (review 2026-12-07-e: it was null)
        (GPT2, "eager"),
        (GPT2 + "  implementation: huggingface\n", "sdpa"),  # transformers' default, SDPA
        # a generic model has no attention shapes: written, the kernel would be noted as having
        # no effect, so it stays null (docs/commands.md)
        (
            "name: g\nmodel: {parameters: 1000000000, layers: 24, hidden: 2048, "
            "activation_bytes_per_layer: 200 MB}\nhardware: {preset: dgx-h100}\n",
            None,
        ),
    ],
    ids=["megatron", "huggingface", "generic"],
)
def test_a_default_attention_kernel_is_written_as_it_resolved(tmp_path, text, written):
    from tiersim import api
    from tiersim.runner import scenario_notes

    path = tmp_path / "s.yaml"
    path.write_text(text)
    loaded = load_scenario(path)
    s = loaded.scenario
    assert s.training.attention_kernel is None
    doc = yaml.safe_load(scenario_yaml(s, "s.yaml"))  # what `run` writes
    assert doc["training"]["attention_kernel"] == written
    again = build(doc, tmp_path, "document")
    # the rerun: the same notes (none added by the written kernel), the same report
    notes = [p.message for p in scenario_notes(s)]
    assert [p.message for p in scenario_notes(again.scenario)] == notes
    if written is not None:
        assert api.run(again).report == api.run(loaded).report
