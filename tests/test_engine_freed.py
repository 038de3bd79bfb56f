"""A finished engine is freed by reference counting: a sweep worker runs its points with the
cyclic collector paused (tiersim.sweep.keep.collector_paused), so an engine left in a
reference cycle would hold its whole schedule until the point ends."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

import tiersim.engine.core as core
from tiersim.config.load import load_scenario
from tiersim.engine import chain
from tiersim.runner import report_for
from tiersim.sweep.keep import collector_paused

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def test_every_engine_of_a_run_is_freed_without_the_cyclic_collector(monkeypatch) -> None:
    made: list[weakref.ref] = []
    init = core.Engine.__init__

    def remembered(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        made.extend((weakref.ref(self), weakref.ref(self.net)))

    monkeypatch.setattr(core.Engine, "__init__", remembered)
    loaded = load_scenario(SCENARIOS / "default.yaml")  # checkpointed: several engine runs
    with collector_paused():
        assert not gc.isenabled()
        report_for(loaded)
        alive = [ref() for ref in made if ref() is not None]
    assert len(made) >= 4
    assert alive == []
    assert gc.isenabled()


def test_an_engine_walked_as_a_chain_is_freed_without_the_cyclic_collector(monkeypatch) -> None:
    """Korthikanti et al.'s 22B (Table 5) is one chain (tiersim.engine.chain): its engine,
    never run on the event loop, still lets go of the bound callbacks that tie it to itself."""
    made: list[weakref.ref] = []
    walked: list[bool] = []
    init, walks = core.Engine.__init__, chain.walks

    def remembered(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        made.extend((weakref.ref(self), weakref.ref(self.net)))

    def seen(engine) -> bool:
        walked.append(walks(engine))
        return walked[-1]

    monkeypatch.setattr(core.Engine, "__init__", remembered)
    monkeypatch.setattr(chain, "walks", seen)
    loaded = load_scenario(SCENARIOS / "published" / "korthikanti2022-22b-selective-sp.yaml")
    with collector_paused():
        report_for(loaded)
        alive = [ref() for ref in made if ref() is not None]
    assert walked and all(walked)
    assert made
    assert alive == []


def test_the_collector_is_back_on_after_a_point_that_raised() -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("a point's bug")
    assert gc.isenabled()
