"""The step picture's GPU row says what its busy share counts, in the run table's words
(`tiersim run --plot` of nemo2407-gpt3-175b-512gpus: "88.3 % busy" beside the table's 88.0 %
compute + 0.1 % optimizer: the other 0.2 % is collective kernels on the GPU's stream, which the
table counts among its exposed collectives, 1.4 %, not as compute)."""

from __future__ import annotations

from tiersim.report.plot_timeline import row_label


def test_a_gpu_row_doing_several_kinds_of_work_names_each_share():
    # 1 s drawn: forward 0-0.3 s, backward 0.3-0.8 s (compute: 0.8 s, 80.0 %), a collective
    # kernel 0.8-0.82 s (2.0 %: the table counts it in exposed collectives, not compute), the
    # optimizer 0.9-0.91 s (1.0 %): busy 0.83 s, 83.0 %
    events = [
        (0, 0.0, 0.3, "forward"),
        (0, 0.3, 0.8, "backward"),
        (0, 0.8, 0.82, "collective"),
        (0, 0.9, 0.91, "optimizer"),
    ]
    assert row_label("GPU compute", events, 1.0) == (
        "GPU compute, 83.0 % busy (80.0 % compute, 1.0 % optimizer, 2.0 % collectives)"
    )


def test_a_gpu_row_of_compute_alone_keeps_its_short_label():
    assert row_label("GPU compute", [(0, 0.0, 0.8, "forward")], 1.0) == "GPU compute, 80.0 % busy"
