"""Step time against published measured iteration times (issues 5 and 17's accuracy targets).

The references and their sources are in scenarios/published/references.yaml (Korthikanti et
al. 2022 Table 5, Narayanan et al. 2021 Table 1, Smith et al. 2022, Ma and Wang 2025, Ren et
al. 2021 Fig. 8 and Table 4). Runs a constant was fitted to (`calibrates`) are left out: tested
in test_presets_hardware. Each run is compared on its reference's metric (step time, or the
optimizer's time for Table 4).
Targets: Korthikanti Table 5 mean absolute error within 3 %, none above 6 % (Calculon, an
analytic model run on the same table: 3.65 % and 8.9 %); every Megatron-LM run (Korthikanti,
Narayanan, Smith) within 5 % mean, none above 10 %; everything within 10 % mean, none above 20 %;
and what the offload runs reach against issue 18's targets, below.
"""

import pytest
from docs_text import page

from tiersim.config.load import load_scenario
from tiersim.groundtruth.published import load_references
from tiersim.runner import simulate


@pytest.fixture(scope="module")
def results() -> dict[str, tuple]:
    """Each counted run's (simulated step, reference)."""
    out = {}
    for ref in load_references():
        if not ref.calibrates:
            out[ref.name] = (simulate(load_scenario(ref.scenario).scenario), ref)
    return out


@pytest.fixture(scope="module")
def errors(results) -> dict[str, float]:
    return {
        name: getattr(step, ref.metric) / ref.iteration_time_s - 1.0
        for name, (step, ref) in results.items()
    }


def _within(errors: dict[str, float], mean_target: float, max_target: float) -> None:
    mean = sum(abs(e) for e in errors.values()) / len(errors)
    worst = max(errors, key=lambda k: abs(errors[k]))
    assert mean <= mean_target, errors
    assert abs(errors[worst]) <= max_target, (worst, errors[worst])


def test_korthikanti_table5_within_3_percent_mean_6_max(errors):
    table5 = {k: e for k, e in errors.items() if k.startswith("korthikanti2022")}
    assert len(table5) == 8
    _within(table5, 0.03, 0.06)


def test_every_megatron_run_within_5_percent_mean_10_max(errors):
    megatron = {
        k: e for k, e in errors.items() if k.startswith(("korthikanti", "narayanan", "smith"))
    }
    assert len(megatron) == 20  # 21 runs, less the MT-NLG run the DeepSpeed figure was fitted to
    _within(megatron, 0.05, 0.10)


def test_published_iteration_times_within_targets(errors):
    older = {k: e for k, e in errors.items() if not k.startswith("nemo2407")}
    assert len(older) == 29  # 38 runs, less the 9 a constant was fitted to
    _within(older, 0.10, 0.20)


def test_the_modern_group_is_out_of_sample_and_reported(errors):
    # issue 39: the NeMo 24.07 performance summary's DGX H100 FP8 runs (GPT-3 175B at 128
    # and 512 GPUs, Llama 2 7B, 13B, 70B, Llama 3 8B and 70B at context parallelism 2),
    # nothing fitted to them. Target mean 5 %, max 10 %: NOT met (docs/kernels.md); this
    # pins what is reported so a change to it is seen: every run too fast, since delayed
    # scaling's quantize kernels run at TE's measured cast-transpose rate
    # (docs/h100-kernel-evidence.md) and NeMo's recipe is priced as shipped (batched pipeline
    # exchanges, fused RoPE, FP8-writing norms, the embedding's dense gradient, residual adds
    # without dropout: docs/nemo-as-shipped.md); before both, 11.9 % / 20.2 %
    modern = {k: e for k, e in errors.items() if k.startswith("nemo2407")}
    assert len(modern) == 7
    assert all(e < 0 for e in modern.values()), modern
    assert sum(abs(e) for e in modern.values()) / 7 <= 0.085, modern  # measured 8.4 %
    assert max(abs(e) for e in modern.values()) <= 0.16, modern  # measured 15.9 %


def test_offload_runs_against_issue_18(errors):
    # Issue 18, the offload runs counted (ZeRO-Offload Fig. 8 on one V100, Ma and Wang's 3B):
    # measured mean 4.73 %, worst 9.48 % (Fig. 8's 6B; the 3B -0.30 %; Fig. 8's mean 5.28 %)
    # with Megatron-LM v1's query_key_value one tensor (DeepSpeed's bucket reduces of a GPT-2
    # layer: state/held_layout.py; 4.65 % and 5.20 % with q, k and v apart), with DeepSpeed's CPU
    # path's remainder per parameter tensor of the rank's partition (fitted on Ma and Wang's
    # 1.5B run), Megatron-LM v1's unfused kernels, ZeRO-2's gradient copies and the gradient
    # path's kernels on the compute stream, each bucket reduce dividing DeepSpeed v0.3's whole
    # reduce buffer, Fig. 8's checkpoints copied to the host in stream order, and the GEMMs on
    # the best of cuBLAS's tiles at the rate L2 feeds each (every constant refitted). With that
    # remainder a rate per parameter: mean 5.62 %, worst 9.30 % (the 6B), the 3B +9.04 %; with
    # the two largest tiles only as well: mean 6.17 %, the 3B +11.10 %; before this issue's
    # kernels: mean 6.3 %, worst 12.6 % (the 13B). The issue asks for 10 % each and a 5 %
    # mean: both met (docs/validation.md).
    offload = {k: e for k, e in errors.items() if k.startswith(("ren2021-zero", "ma2025"))}
    assert len(offload) == 9
    assert max(abs(e) for e in offload.values()) <= 0.10, offload  # issue 18
    assert sum(abs(e) for e in offload.values()) / len(offload) <= 0.05, offload  # issue 18
    assert sum(abs(e) for e in offload.values()) / len(offload) <= 0.0475, offload  # measured
    figure8 = {k: e for k, e in offload.items() if k.startswith("ren2021")}
    assert max(abs(e) for e in figure8.values()) <= 0.0955, figure8
    assert sum(abs(e) for e in figure8.values()) / len(figure8) <= 0.0530, figure8
    assert abs(offload["ma2025-qwen2.5-3b-zero-offload"]) <= 0.01


# docs/validation.md's table rows: the runs each counts, by the start of their names
VALIDATION_ROWS = {
    "Korthikanti et al. 2022, Table 5": ("korthikanti2022",),
    "Narayanan et al. 2021, Table 1": ("narayanan2021",),
    "Smith et al. 2022 (MT-NLG, 350 and 420 nodes)": ("smith2022",),
    "Ma and Wang 2025 (3B offload)": ("ma2025",),
    "Ren et al. 2021 (ZeRO-Offload Fig. 8; Table 4 all fitted)": ("ren2021",),
    "all 29": ("korthikanti", "narayanan", "smith", "ma2025", "ren2021"),
}


def _mean_worst(errors: dict[str, float], prefixes: tuple[str, ...]) -> tuple[str, str]:
    picked = [abs(e) for k, e in errors.items() if k.startswith(prefixes)]
    return f"{100 * sum(picked) / len(picked):.1f} %", f"{100 * max(picked):.1f} %"


def test_validation_page_quotes_the_errors_check_published_gives(errors, results):
    """docs/validation.md's accuracy table said Korthikanti 2.4 %, Narayanan 2.7 % / 6.1 % and
    Table 5's 530B / 1T memory-bound 1.7 / 2.7 s, where `tiersim check-published` printed 2.5 %,
    2.6 % / 6.0 % and 1.9 / 3.1 s: a reader judging the model by the page read older figures."""
    text = page("validation")
    rows = {
        ln.split("|")[1].strip(): ln.split("|")
        for ln in text.splitlines()
        if ln.strip().startswith("|")
    }
    for label, prefixes in VALIDATION_ROWS.items():
        mean, worst = _mean_worst(errors, prefixes)
        cells = rows[label]
        assert cells[3].strip() == mean and cells[4].strip().startswith(worst), (label, cells)
    flat = " ".join(text.split())
    mean, worst = _mean_worst(errors, ("korthikanti", "narayanan", "smith"))
    assert f"Every Megatron-LM run but the fitted one (20): mean {mean}, worst {worst}" in flat
    parts = [results[f"korthikanti2022-{m}-selective-sp"][0].breakdown for m in ("530b", "1t")]
    said = ", ".join(
        f"{what} {parts[0][key]:.1f} / {parts[1][key]:.1f}"
        for what, key in (
            ("GEMM", "gemm_s"),
            ("memory-bound", "memory_bound_s"),
            ("blocking collectives", "collectives_s"),
            ("fill and drain", "bubble_s"),
            ("waiting on the last stage's head", "imbalance_s"),
        )
    )
    assert f"Table 5's 530B and 1T runs (seconds, selective + SP): {said}." in flat
