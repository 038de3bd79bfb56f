"""A progress bar says its last line once: `tiersim plan` updates its bar as the last batch
lands and again as the pool ends, and printed `[####] 1/1 plans simulated or pruned` twice."""

import io

from tiersim.sweep.progress import Progress


def test_the_last_line_is_written_once():
    out = io.StringIO()  # not a terminal: a line per update that is written
    bar = Progress(1, out, label="plans simulated or pruned")
    bar.update(1)
    bar.update(1)
    assert out.getvalue().count("1/1 plans simulated or pruned") == 1
