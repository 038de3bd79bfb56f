"""The time each channel (a link, a network channel) had a flow on it, as the flows end."""

from __future__ import annotations

from tiersim.core.intervals import union

Spans = list[tuple[float, float]]


class BusyLog:
    """Intervals during which at least one flow used a named channel (a link, say): each
    flow's span is added as it ends, merged with the last where they touch (`merge_span`),
    and the union is taken on reading (a flow may end after one that began later).

    `lists(keys)` hands out the channels' own span lists, for a caller that adds to them
    with `merge_span` itself (the flow network, once per flow: no call, no lookup by name).
    The union read is kept once the log is sealed (its network's run is over) and worked
    out afresh on every read before."""

    def __init__(self) -> None:
        self._spans: dict[str, Spans] = {}
        self._merged: dict[str, Spans] | None = None
        self._sealed = False

    def add_span(self, key: str, start: float, end: float) -> None:
        self.add_spans((key,), start, end)

    def add_spans(self, keys: tuple[str, ...], start: float, end: float) -> None:
        """[start, end) on each key's channel (a flow's channels and ANY: one call a flow)."""
        if end <= start:
            return
        self._merged, self._sealed = None, False
        for spans in self.lists(keys):
            merge_span(spans, start, end)

    def lists(self, keys: tuple[str, ...]) -> tuple[Spans, ...]:
        """Each key's span list, made empty where it has none yet (an empty list is no
        channel in `intervals`)."""
        all_spans = self._spans
        return tuple(all_spans.setdefault(key, []) for key in keys)

    def seal(self, in_order: bool = False) -> None:
        """No span is added any more (until `add_spans`): the union read may be kept.
        `in_order`: each channel's spans are disjoint and sorted already (a walked chain's:
        tiersim.engine.chain), their own union."""
        self._sealed = True
        if in_order:
            self._merged = {key: list(spans) for key, spans in self._spans.items() if spans}

    @property
    def intervals(self) -> dict[str, Spans]:
        """Each channel's busy time as disjoint, sorted intervals."""
        merged = self._merged
        if merged is None:
            merged = {key: union(spans) for key, spans in self._spans.items() if spans}
            if self._sealed:
                self._merged = merged
        return merged


def merge_span(spans: Spans, start: float, end: float) -> None:
    """[start, end) onto one channel's spans (start < end), merged with the last where they
    touch: ends come in time order, so only the start can be earlier than the last's."""
    if spans:
        last = spans[-1]
        if start <= last[1]:
            spans[-1] = (start if start < last[0] else last[0], end)
            return
    spans.append((start, end))
