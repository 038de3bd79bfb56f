"""A new user's review of the day's features (review e, docs/review-2026-12-06-d.md): each
confusing or wrong output found, held to what it now says."""

from __future__ import annotations

import json

import pytest
from conftest import scenario

from tiersim.core.errors import InputError


def test_a_kernel_table_without_fp8_rates_is_not_said_to_expect_a_recipe_named_none():
    """gb200's table measures attention only (no GEMM rate published for the GB200): FP8
    linears on it said "expected one of: none", and `training.fp8.recipe: none` is no recipe."""
    raw = {
        "name": "f",
        "model": {"preset": "llama-2-7b"},
        "training": {"fp8": {"recipe": "delayed"}},
        "hardware": {"preset": "dgx-b200", "gpu": {"kernels": "gb200"}},
    }
    with pytest.raises(InputError) as caught:
        scenario(raw)
    text = str(caught.value)
    assert "expected one of: none" not in text
    assert "kernel table gb200 measures no FP8 GEMM at all" in text
    assert "--set training.fp8=null" in text


def test_run_s_table_says_the_prefetch_depth_a_set_changed(cli, tmp_path):
    """`--set simulation.prefetch_depth=3` on the FSDP2 scenario moved the step and the
    all-gather buffer (404.77 MB -> 1.21 GB: 3 layers' all-gather buffers in backward) and
    no line said why. FSDP2's default is 1 (its own prefetch: config/framework.py), so 3 is
    its explicit prefetch with 3 - 1 = 2 buffers more."""
    path = "scenarios/fsdp2-cpu-offload-llama2-7b.yaml"

    def offload_line(*sets: str) -> str:
        flags = [a for s in sets for a in ("--set", s)]
        code, out, err = cli("run", path, "--out", tmp_path / "t", *flags)
        assert code == 0, err
        return next(x for x in out.splitlines() if x.startswith("Offload"))

    assert "; prefetch depth 1 (simulation.prefetch_depth, FSDP2's default);" in offload_line()
    assert (
        "; prefetch depth 3 (simulation.prefetch_depth; FSDP2's default 1): FSDP2's explicit "
        "prefetch, 2 all-gather buffers more in each layer's backward;"
    ) in offload_line("simulation.prefetch_depth=3")


def test_the_memory_panel_s_title_says_what_its_dot_marks():
    """The panel's curves are the allocator's and its dot the allocation peak, but the title
    said "peak" beside the device's total (reserved and the memory outside the allocator):
    zero-offload-10b-dgx2's title read 30.29 GB over a dot at 28.50 GB.

    One 12 MiB activation, a segment of its own (10 MiB or more: rounded to 2 MiB, 12 MiB),
    and a 100 MiB CUDA context outside: allocated 12 MiB = 12,582,912 B (12.58 MB); the
    device holds 12 + 100 = 112 MiB = 117,440,512 B (117.44 MB) of 1e9 B."""
    from tiersim.report.plot_memory import memory_title
    from tiersim.state.timeline import Event, Outside, evaluate

    mib = 2**20
    events = [
        Event("forward: layer 0", "forward", "a0", "saved activations", 12 * mib, True),
        Event("backward: layer 0", "backward", "a0", "saved activations", 12 * mib, False),
    ]
    t = evaluate("hbm", 10**9, events, [Outside("CUDA context", 100 * mib, "test")])
    assert memory_title(t) == (
        "memory timeline (hbm): the device holds at most 117.44 MB of 1.00 GB\n"
        "at forward: layer 0 (the dot: 12.58 MB allocated)"
    )


def test_run_s_table_says_where_the_memory_events_went(cli, tmp_path):
    """`run --memory-events` in the table format wrote the series into report.json and said
    nothing of it. zero-offload-10b-dgx2: 412 GPU events, more than 256 rows, so a row a
    moment: 106 rows; 107 host events, a row each (docs/commands.md, Results;
    tests/test_memory_series.py)."""
    path = "scenarios/zero-offload-10b-dgx2.yaml"
    code, out, err = cli("run", path, "--out", tmp_path / "a", "--memory-events")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("memory events"))
    assert line.startswith(
        "memory events written to report.json: GPU: 412 events in 106 rows (a row a moment), "
        "memory_timeline.series; host: 107 events in 107 rows (a row an event), "
        "host_memory_timeline.series (columns: phase, moment, part, bytes, "
    )
    code, out, err = cli("run", path, "--out", tmp_path / "b")
    assert code == 0, err
    assert "memory events" not in out


def test_a_note_on_a_mapping_names_the_set_of_a_key_under_it(cli, tmp_path):
    """`--set training.fp8.recipe=delayed` on a generic model: the W-NO-EFFECT note is on
    `training.fp8` and said neither its --set nor a line (a --set of the key itself or of a
    mapping above it was named; one under it was not)."""
    path = tmp_path / "gen.yaml"
    path.write_text(
        "name: gen\nmodel: {parameters: 1e9, layers: 16, hidden: 2048, heads: 16}\n"
        "hardware: {preset: dgx-h100}\n"
    )
    code, _out, err = cli("inventory", path, "--set", "training.fp8.recipe=delayed")
    assert code == 0, err
    note = next(x for x in err.splitlines() if "[W-NO-EFFECT]" in x)
    assert note.startswith(f"note: {path}: training.fp8: has no effect on the GEMMs")
    assert note.endswith("(from --set training.fp8.recipe=delayed) [W-NO-EFFECT]")


WHERE = "training.offload.reduce_bucket_size"


def test_a_given_reduce_bucket_is_counted_by_the_release_not_by_being_given(cli):
    """zero-offload-10b-dgx2 (ZeRO-2, fp16 weights, overlap_comm off: one buffer) with the key
    set to DeepSpeed's own default, 5e8, once held v0.3's 4.5 x 5e8 x 2 B = 4.50 GB where the
    key left out held 1.00 GB (a W-FRAMEWORK-LIMIT note said so). The rule now follows
    `training.deepspeed.version` (config/deepspeed.py): under `latest` (the default) the
    given 5e8 is the bucket left out, 5e8 x 2 B = 1,000,000,000 B from the backward's first
    gradient, and nothing is noted; under 0.3.16 it is v0.3's 4,500,000,000 B in `workspace`."""
    path = "scenarios/zero-offload-10b-dgx2.yaml"
    views = {}
    for name, sets in (
        ("given", [f"{WHERE}=5e8"]),
        ("left out", []),
        ("v0.3", [f"{WHERE}=5e8", "training.deepspeed.version=0.3.16"]),
    ):
        args = [x for key in sets for x in ("--set", key)]
        code, out, err = cli("inventory", path, "--format", "json", *args)
        assert code == 0, err
        assert "[W-FRAMEWORK-LIMIT]" not in err and "reduce_bucket_size:" not in err, err
        views[name] = json.loads(out)
    # the inventory and its timeline alike, but the bucket's name, which says it was given
    given = json.dumps(views["given"])
    assert "reduce_bucket_size 5e8 given" in given and "5e8 by default" not in given
    assert json.loads(given.replace("5e8 given", "5e8 by default")) == views["left out"]
    per_gpu = {name: view["inventory"]["per_gpu"] for name, view in views.items()}
    workspace = per_gpu["v0.3"]["workspace"] - per_gpu["left out"]["workspace"]
    assert workspace == 4_500_000_000
