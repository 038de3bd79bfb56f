"""The line of each key of a YAML document, so that an error about a key path can say where
the key is written: `training.micro_batch_sise` -> 12. Worked out only when an error is
reported; aliases are not followed (a shared node is where its anchor is), so a hostile
document costs no more than its text."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator

import yaml

from tiersim.core.errors import InputError, Problem


def key_lines(text: str) -> dict[str, int]:
    """Dotted key path (list items by index) -> 1-based line of its key (or item)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)  # nodes only: nothing constructed
    except (yaml.YAMLError, RecursionError):
        return {}
    lines: dict[str, int] = {}
    seen: set[int] = set()
    # breadth first, in document order: a node reached through an alias is walked where it is
    # first met, which is its anchor for top-level keys
    queue: deque[tuple[str, yaml.Node]] = deque([("", root)] if root is not None else [])
    while queue:
        prefix, node = queue.popleft()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            items = [(str(k.value), k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode)]
        elif isinstance(node, yaml.SequenceNode):
            items = [(str(i), v, v) for i, v in enumerate(node.value)]
        else:
            continue
        for name, mark_node, child in items:
            path = f"{prefix}.{name}" if prefix else name
            lines.setdefault(path, mark_node.start_mark.line + 1)
            queue.append((path, child))
    return lines


# problems about a value written elsewhere: a --set override, or a sweep's base scenario
_NOT_IN_THIS_FILE = ("--set", "(base scenario ")


def with_lines(exc: InputError, text: str) -> InputError:
    """`exc` with each problem's line added where its key path (or the nearest key above it)
    is written in `text`; problems from --set overrides or a sweep's base scenario are left
    as they are."""
    lines = key_lines(text)
    if not lines:
        return exc
    problems = []
    for p in exc.problems:
        elsewhere = any(mark in p.message for mark in _NOT_IN_THIS_FILE)
        line = None if elsewhere else _line_of(p.path, lines)
        problems.append(p if line is None else Problem(p.path, f"{p.message} (line {line})"))
    return InputError(exc.source, problems)


@contextlib.contextmanager
def lines_from(text: str) -> Iterator[None]:
    """Within it, an InputError about the file whose text is `text` is raised again with
    the line of each problem's key (`with_lines`)."""
    try:
        yield
    except InputError as exc:
        raise with_lines(exc, text) from None


def _line_of(path: str, lines: dict[str, int]) -> int | None:
    parts = path.split(".") if path else []
    while parts:
        line = lines.get(".".join(parts))
        if line is not None:
            return line
        parts.pop()
    return None
