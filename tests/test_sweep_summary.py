"""The sweep summary's best points: ties are said, all-tied objectives are left out."""

from tiersim.sweep.rows import Table
from tiersim.sweep.summary import best_points


def _table(times: list[float], goodputs: list[float]) -> Table:
    rows = [
        {"point": i, "status": "ok", "step.time_s": t, "checkpoint.goodput": g}
        for i, (t, g) in enumerate(zip(times, goodputs, strict=True))
    ]
    outputs = ["step.time_s", "checkpoint.goodput"]
    return Table(rows, ["point", "status", *outputs], [], outputs)


def test_best_point_counts_the_points_that_tie_with_it():
    # points 1 and 3 both take 2 s (3 differs by 1e-9 relative: a tie); goodput all equal
    table = _table([3.0, 2.0, 4.0, 2.0 * (1 + 1e-9)], [0.5, 0.5, 0.5, 0.5])
    best = best_points(table)
    assert [(label, row["point"], ties) for label, _, row, ties in best] == [
        ("shortest step", 1, 2)
    ]


def test_a_point_that_does_not_fit_is_never_best():
    # point 1 is fastest but does not fit: point 2 is the best that can run
    table = _table([3.0, 1.0, 2.0], [0.5, 0.9, 0.7])
    for row, fits in zip(table.rows, [True, False, True], strict=True):
        row["fits"] = fits
    best = {label: row["point"] for label, _, row, _ in best_points(table)}
    assert best == {"shortest step": 2, "highest goodput": 2}


def test_a_row_from_before_the_fits_column_is_judged_by_its_tiers():
    # a resumed folder's old rows have tiers.<tier>.fits but no top-level fits
    table = _table([1.0, 2.0, 3.0], [0.5, 0.6, 0.7])
    for row, hbm in zip(table.rows, [False, True, True], strict=True):
        row["tiers.hbm.fits"], row["tiers.dram.fits"] = hbm, True
    best = {label: row["point"] for label, _, row, _ in best_points(table)}
    assert best == {"shortest step": 1, "highest goodput": 2}


def test_a_failed_point_is_never_best():
    table = _table([3.0, 1.0], [0.5, 0.9])
    table.rows[1]["status"] = "error"
    assert best_points(table) == []  # one ok point: nothing to compare


def _spec_points(n: int):
    import argparse

    spec = argparse.Namespace(name="t", grid=(), zip=())
    return spec, [argparse.Namespace(index=i, values={}, coords=()) for i in range(n)]


def test_where_every_point_is_over_a_budget_the_best_of_them_is_shown_as_such():
    from tiersim.sweep.summary import summary_text

    table = _table([3.0, 2.0, 4.0], [0.5, 0.5, 0.5])
    for row in table.rows:
        row["fits"], row["wear.hbf.within_budget"] = True, False
    table.outputs.append("wear.hbf.within_budget")
    text = summary_text(*_spec_points(3), table)
    lines = text.splitlines()
    at = lines.index(
        "no point fits and holds every write budget; best of the 3 that fit, each over a flash "
        "write budget:"
    )
    assert lines[at + 3].startswith("shortest step") and lines[at + 3].split()[-1] == "1"
    assert (
        "verdicts: none changes across the sweep (wear.hbf.within_budget: no at every point)"
        in (text)
    )


def test_where_no_point_fits_the_best_of_those_that_ran_is_shown_as_such():
    from tiersim.sweep.summary import summary_text

    table = _table([3.0, 2.0], [0.5, 0.5])
    for row in table.rows:
        row["fits"] = False
    text = summary_text(*_spec_points(2), table)
    assert "no point fits and holds every write budget; best of the 2 that ran, none fitting " in (
        text
    )
    assert best_points(table) == []  # none of them is a point to run


def test_goodputs_less_than_a_hundredth_of_a_point_apart_rank_nothing():
    # 99.998 %, 99.999 % and 99.9995 %: at most 0.002 percentage points (2e-5) apart, under
    # the 0.01 points (1e-4) the summary shows: no "highest goodput"; the step times rank
    table = _table([3.0, 2.0, 4.0], [0.99998, 0.99999, 0.999995])
    best = [(label, row["point"], ties) for label, _, row, ties in best_points(table)]
    assert best == [("shortest step", 1, 1)]
    # 99.0 % against 99.9 %: 0.9 points apart, ranked
    table = _table([3.0, 2.0, 4.0], [0.99, 0.999, 0.99])
    best = {label: row["point"] for label, _, row, _ in best_points(table)}
    assert best == {"shortest step": 1, "highest goodput": 1}
