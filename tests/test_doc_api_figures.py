"""docs/api.md's cells run, in order, as a notebook runs them (one namespace, each cell's
printed text and its last expression's value), and every figure the page prints after a cell
is in what that cell really gives, so the walk-through cannot go stale unseen. The figures the
page words in prose (the comments beside the outputs, the paragraphs under them) are checked
as the page writes them, units and all."""

from __future__ import annotations

import ast
import contextlib
import io
import re

import pytest
from docs_text import ROOT, page

# a python cell, then the output block the page shows for it (where it shows one)
CELL = re.compile(r"```python\n(.*?)```\n(?:```\n(.*?)```\n)?", re.S)
NUMBER = re.compile(r"(\d+(?:\.\d+)?)")
# the page's own words beside an output ("... True)    # 54.3 ms a step"), not the output's
COMMENT = re.compile(r"\s{2,}# .*$", re.M)
# the user's file the "Plan" cell names: the page's scenario with a small plan: section
MY_SCENARIO = "plan: {placement.optimizer: [hbm, hbf]}\n"


def _run_cell(code: str, namespace: dict) -> str:
    """What a notebook shows for the cell: its printed text, then its last expression's repr."""
    tree = ast.parse(code)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        exec(compile(tree, "docs/api.md", "exec"), namespace)
        value = (
            eval(compile(ast.Expression(last.value), "docs/api.md", "eval"), namespace)
            if last
            else None
        )
    return shown.getvalue() + ("" if value is None else repr(value))


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    """Every cell run once, in a folder holding the repository's scenarios and fixtures (the
    cells' relative paths) and the reader's my-scenario.yaml: [(page's output, real output)]
    and the namespace the cells left."""
    here = tmp_path_factory.mktemp("notebook")
    for name in ("scenarios", "tests"):
        (here / name).symlink_to(ROOT / name)
    seed = (ROOT / "scenarios" / "seed-1b-adam.yaml").read_text()
    (here / "my-scenario.yaml").write_text(
        seed.replace("name: seed-1b-adam", "name: mine") + MY_SCENARIO
    )
    namespace: dict = {}
    shown = []
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(here)
        for code, output in CELL.findall(page("api")):
            real = _run_cell(code, namespace)
            if output:
                shown.append((output, real))
    assert (here / "step.png").stat().st_size > 0  # the figure cell saved its picture
    return shown, namespace


def _same(page_text: str, real: str) -> bool:
    """The page's output is the real one, whitespace aside, each number as the page rounds it
    (the page shortens floats: 0.0282 for 0.028187686388402248)."""
    ours = NUMBER.split(" ".join(page_text.split()))
    theirs = NUMBER.split(" ".join(real.split()))
    if len(ours) != len(theirs):
        return False
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if i % 2 == 0 or "." not in a or "." not in b:
            if a != b:
                return False
        elif f"{float(b):.{len(a.split('.')[1])}f}" != a:
            return False
    return True


def _lines_in_order(page_text: str, real: str) -> bool:
    """A long output the page elides ("..."): its shown lines, in order, are the output's."""
    lines = iter(real.splitlines())
    return all(any(ln == r for r in lines) for ln in page_text.splitlines() if ln.strip() != "...")


def test_every_output_the_page_shows_is_what_its_cell_gives(notebook):
    shown, _ = notebook
    fences = [ln for ln in page("api").splitlines() if ln.startswith("```")]
    outputs = len(fences) // 2 - fences.count("```python")
    assert len(shown) == outputs == 9  # every output block the page shows found its cell
    for output, real in shown:
        output = COMMENT.sub("", output)
        elided = any(ln.strip() == "..." for ln in output.splitlines())
        assert (_lines_in_order if elided else _same)(output, real), f"{output}\n!=\n{real}"


def test_the_step_comment_and_the_import_comment_are_the_runs(notebook):
    _, ns = notebook
    text = page("api")
    step = ns["run"].report["step"]
    assert f"# {step['time_s'] * 1e3:.1f} ms a step, {step['tokens_per_s']:,.0f} tokens/s" in text
    r = ns["r"].report
    hbm = r["tiers"]["hbm"]
    assert (
        f"# {r['step']['time_s']:.1f} s a step; a {hbm['peak_bytes'] / 1e9:.1f} GB peak on an A100 "
        f"80GB ({hbm['capacity_bytes'] / 1e9:.2f} GB as CUDA gives it)"
    ) in text


def test_without_sequence_parallel_the_import_would_not_fit(notebook):
    _, ns = notebook
    api = ns["api"]
    report = api.run(api.override(ns["loaded"], {"parallel.sequence": False})).report
    assert ns["loaded"].scenario.parallel.sequence is True  # what the import set
    assert not report["fits"]
    hold = f"without it the same run would hold {report['tiers']['hbm']['peak_bytes'] / 1e9:.1f} GB"
    assert hold in " ".join(page("api").split())


def test_the_wear_paragraph_is_the_wear_verdicts_arithmetic(notebook):
    _, ns = notebook
    hbf = ns["w"].dicts()["hbf"]
    step_s = 86_400 / hbf["steps_per_day"]
    per_day = f"{hbf['host_bytes_written_per_day'] / 1e15:.2f} PB a day"
    moments, steps = f"{hbf['host_bytes_written_per_step'] / 1e9:.0f} GB", hbf["steps_per_day"]
    quoted = (
        f"{moments}, rewritten every step of {step_s:.4f} s: 86,400 s / {step_s:.4f} s = "
        f"{steps:,.0f} steps a day, {moments} x {steps:,.0f} = {per_day}; "
        f"{hbf['capacity_bytes'] / 1e12:.0f} TB of HBF x {hbf['pe_cycles']:,.0f} P/E cycles / "
        f"{per_day} = {hbf['lifetime_days']:.2f} days"
    )
    assert quoted in " ".join(page("api").split())


def test_the_hand_arithmetic_beside_the_cells(notebook):
    _, ns = notebook
    text = " ".join(page("api").split())
    # 16 sequences a step / (2 a micro-batch x 4 data-parallel ranks) = 2 micro-batches
    assert "# 16 / (2 x 4) = 2" in text and 16 // (2 * 4) == 2
    assert ns["tiny"].scenario.training.grad_accumulation == 2
    # the inventory's paragraph: 1e9 x 2 B = 2 GB; 1e9 x 2 moments x 4 B = 8 GB;
    # 24 layers x 200 MB = 4.8 GB; two cuBLAS workspaces of 32 MiB = 67,108,864 B
    rows = {
        row["class"]: row["bytes_per_gpu"] for row in ns["api"].inventory_table(ns["s"]).to_pylist()
    }
    assert rows["weights"] == 10**9 * 2 and rows["optimizer"] == 10**9 * 2 * 4
    assert rows["activations"] == 24 * 200 * 10**6 and rows["workspace"] == 2 * 32 * 2**20
    assert "Adam's two fp32 moments 8 GB; 24 layers x 200 MB of activations" in text
