"""`tiersim inventory --plot FILE.png`: the step's memory timelines drawn without simulating
the step (the panels at the foot of `run --plot`'s step.png): the GPU's, and the host's beside
it where the step uses host memory. `inventory --plot` did not exist (argparse refused it)."""

from __future__ import annotations

import json

import pytest

SCENARIO = """\
name: small
model: {preset: gpt2}
training: {micro_batch_size: 1, seq_len: 256}
hardware: {preset: dgx-h100}
"""
HOST = "placement: {optimizer: dram, optimizer_compute: cpu}\n"  # the step uses host memory


def _figure_titles(png: bytes) -> None:
    assert png.startswith(b"\x89PNG\r\n\x1a\n")


@pytest.mark.parametrize("extra, panels", [("", 1), (HOST, 2)])
def test_the_picture_has_the_gpus_timeline_and_the_hosts_where_used(tmp_path, extra, panels):
    from tiersim import api
    from tiersim.report.memory_figure import inventory_memory_figure

    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO + extra)
    loaded = api.load(path)
    inv = api.inventory(loaded)
    fig = inventory_memory_figure(loaded.scenario, inv, api.host_memory(loaded, inv))
    titles = [ax.get_title() for ax in fig.axes]
    assert len(titles) == panels
    assert titles[0].startswith("memory timeline (hbm): the device holds at most ")
    if panels == 2:
        # one GPU of dgx-h100's 8: its share, said as the run's
        assert titles[1].startswith(
            "host memory timeline (dram, one GPU's share; \nthe run's 1 GPU: 1 x this)"
        )
    assert "small: memory over one training step, fits" in fig.get_suptitle()


def test_inventory_writes_the_png_and_names_it(cli, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO + HOST)
    png = tmp_path / "memory.png"
    code, out, err = cli("inventory", path, "--plot", png)
    assert code == 0, err
    assert out.rstrip().endswith(f"plot: {png}")
    _figure_titles(png.read_bytes())
    # beside a JSON report, the line goes to standard error: standard output stays JSON
    png.unlink()
    code, out, err = cli("inventory", path, "--format", "json", "--plot", png)
    assert code == 0 and f"plot: {png}" in err
    assert "host_memory_timeline" in json.loads(out)
    _figure_titles(png.read_bytes())


@pytest.mark.parametrize(
    "name, said",
    [
        ("memory.svg", "the picture is a PNG (expected a file name ending .png, e.g. memory.png)"),
        ("no/memory.png", "does not exist (expected a file path in an existing folder)"),
        (".", "is a folder (expected a file path)"),
    ],
)
def test_a_plot_path_it_cannot_take_is_refused_before_any_work(cli, tmp_path, name, said):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    code, out, err = cli("inventory", path, "--plot", tmp_path / name)
    assert (code, out) == (2, "")
    assert err.startswith(f"--plot: {tmp_path / name}: ") and said in err
    assert path.read_text() == SCENARIO
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]
