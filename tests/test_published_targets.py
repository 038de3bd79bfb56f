"""Step time against published measured iteration times (issue 5's accuracy target).

The references and their sources are in scenarios/published/references.yaml (Korthikanti et
al. 2022 Table 5, Narayanan et al. 2021 Table 1, Smith et al. 2022, Ma and Wang 2025, Ren et
al. 2021 Fig. 8 and Table 4). Target: mean absolute error within 10 %, none above 20 %; and
what the offload runs reach against issue 18's targets, below.
"""

from tiersim.config.load import load_scenario
from tiersim.groundtruth.published import load_references
from tiersim.runner import simulate


def test_published_iteration_times_within_targets():
    errors = {}
    for ref in load_references():
        if ref.calibrates:  # fitted to: tested in test_presets_hardware
            continue
        predicted = getattr(simulate(load_scenario(ref.scenario).scenario), ref.metric)
        errors[ref.name] = predicted / ref.iteration_time_s - 1.0
    assert len(errors) == 30
    mean = sum(abs(e) for e in errors.values()) / len(errors)
    worst = max(errors, key=lambda k: abs(errors[k]))
    assert mean <= 0.10, errors
    assert abs(errors[worst]) <= 0.20, (worst, errors[worst])
    # Issue 18, the offload runs counted (ZeRO-Offload Fig. 8 on one V100, Ma and Wang's 3B):
    # measured mean 6.3 %, worst 12.4 % (Fig. 8's 8B run: its 42 TFLOP/s is the figure's
    # highest, and one GPU efficiency cannot follow it). The issue asks for 10 % each and a
    # 5 % mean: not met (README, Validation).
    offload = {k: e for k, e in errors.items() if k.startswith(("ren2021-zero", "ma2025"))}
    assert len(offload) == 9
    assert sum(abs(e) for e in offload.values()) / len(offload) <= 0.065, offload
    assert max(abs(e) for e in offload.values()) <= 0.135, offload
    assert abs(offload["ma2025-qwen2.5-3b-zero-offload"]) <= 0.10
