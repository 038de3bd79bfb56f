"""A step picture's panels found by what they show (their axis label), not by their position,
so a panel added to the picture moves no test of another."""

from __future__ import annotations


def timeline(fig):
    """The GPU stream, link directions and tier ports in time."""
    (ax,) = [a for a in fig.axes if a.get_xlabel().startswith("time in the simulated step")]
    return ax


def occupancy(fig) -> list:
    """One panel per tier: its occupancy in the step, in the report's tier order."""
    return [
        a
        for a in fig.axes
        if a.get_xlabel().startswith("time in step (")
        or a.get_title().endswith(": not used in this run")  # drawn without axes
    ]


def breakdown(fig):
    """Where the step's seconds go, as one bar."""
    (ax,) = [a for a in fig.axes if a.get_xlabel().startswith("where the step's ")]
    return ax
