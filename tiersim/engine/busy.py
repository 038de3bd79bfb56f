"""The time each channel (a link, a network channel) had a flow on it, as the flows end."""

from __future__ import annotations

from tiersim.core.intervals import union


class BusyLog:
    """Intervals during which at least one flow used a named channel (a link, say): each
    flow's span is added as it ends, merged with the last where they touch, and the union
    is taken on reading (a flow may end after one that began later)."""

    def __init__(self) -> None:
        self._spans: dict[str, list[tuple[float, float]]] = {}
        self._merged: dict[str, list[tuple[float, float]]] | None = None

    def add_span(self, key: str, start: float, end: float) -> None:
        self.add_spans((key,), start, end)

    def add_spans(self, keys: tuple[str, ...], start: float, end: float) -> None:
        """[start, end) on each key's channel (a flow's channels and ANY: one call a flow)."""
        if end <= start:
            return
        self._merged = None
        all_spans = self._spans
        for key in keys:
            spans = all_spans.get(key)
            if spans is None:
                all_spans[key] = [(start, end)]
            elif start <= spans[-1][1]:  # ends come in time order: only the start is earlier
                last = spans[-1]
                spans[-1] = (start if start < last[0] else last[0], end)
            else:
                spans.append((start, end))

    @property
    def intervals(self) -> dict[str, list[tuple[float, float]]]:
        """Each channel's busy time as disjoint, sorted intervals."""
        if self._merged is None:
            self._merged = {key: union(spans) for key, spans in self._spans.items()}
        return self._merged
