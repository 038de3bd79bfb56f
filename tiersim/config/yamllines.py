"""The line of each key of a YAML document, so that an error about a key path can say where
the key is written: `training.micro_batch_sise` -> 12. Worked out only when an error is
reported; aliases are not followed (a shared node is where its anchor is), so a hostile
document costs no more than its text."""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator

import yaml

from tiersim.core.collector import collector_paused
from tiersim.core.errors import InputError, Problem


def _composer(text: str) -> type:
    """libyaml's composer where its recursion is surely shallow and it reads the text as the
    pure-Python one does (tiersim.config.yamlfile.fast_enough's characters): a 1 MiB file of
    76,000 keys took 6 s here. Every level of nesting is a deeper indent, a `[`, a `{` or a
    `-`, so their count bounds the depth."""
    from tiersim.config.yamlfile import fast_enough

    loader = getattr(yaml, "CSafeLoader", None)
    if loader is None or not fast_enough(text, any_size=True):
        return yaml.SafeLoader
    indent = max((len(line) - len(line.lstrip(" ")) for line in text.splitlines()), default=0)
    depth = indent + sum(map(text.count, "[{-"))
    return loader if depth <= _C_DEPTH else yaml.SafeLoader


_C_DEPTH = 200  # levels libyaml's composer may recurse: TIERSIM_MAX_NESTING's ceiling


def key_lines(text: str) -> dict[str, int]:
    """Dotted key path (list items by index) -> 1-based line of its key (or item). The cyclic
    collector paused meanwhile: a node for each value of the text, kept to the end, traced
    for nothing (half the time of a 1 MiB file of 76,000 keys)."""
    with collector_paused():
        return _key_lines(text)


def _key_lines(text: str) -> dict[str, int]:
    try:
        root = yaml.compose(text, Loader=_composer(text))  # nodes only: nothing constructed
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
            items = [(_name(k), k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode)]
        elif isinstance(node, yaml.SequenceNode):
            items = [(str(i), v, v) for i, v in enumerate(node.value)]
        else:
            continue
        for name, mark_node, child in items:
            path = f"{prefix}.{name}" if prefix else name
            lines.setdefault(path, mark_node.start_mark.line + 1)
            queue.append((path, child))
    return lines


def _name(key: yaml.ScalarNode) -> str:
    """A key as a key path names it: YAML's null (`~`) and booleans (`yes`) as the messages
    say them, `null` and `true` (tiersim.core.errors.shown_yaml), else as written."""
    tag = key.tag.rsplit(":", 1)[-1]
    if tag == "null":
        return "null"
    if tag == "bool":
        return "true" if key.value.lower() in ("yes", "true", "on") else "false"
    return str(key.value)


# problems about a value written elsewhere: a --set override, or a sweep's base scenario
_NOT_IN_THIS_FILE = ("--set", "(base scenario ")


def with_lines(
    exc: InputError, text: str, presets: dict[str, tuple[str, str]] | None = None
) -> InputError:
    """`exc` with each problem's line added where its key path (or the nearest key above it)
    is written in `text`; problems from --set overrides or a sweep's base scenario are left
    as they are. `presets`: section -> (file, text) of the preset file a section names; a
    key written there and not in `text` is given as `(FILE, line N)`."""
    lines = key_lines(text)
    if not lines and not presets:  # no scenario text (`measure`'s): its preset file's lines
        return exc
    files = {section: (name, key_lines(body)) for section, (name, body) in (presets or {}).items()}
    problems = []
    for p in exc.problems:
        if any(mark in p.message for mark in _NOT_IN_THIS_FILE):
            problems.append(p)
            continue
        where = _in_preset(p.path, lines, files)
        line = line_of(p.path, lines)
        if where is None and line is not None:
            where = f"line {line}"
        problems.append(p if where is None else Problem(p.path, f"{p.message} ({where})", p.code))
    return InputError(exc.source, problems)


def _in_preset(
    path: str, lines: dict[str, int], files: dict[str, tuple[str, dict[str, int]]]
) -> str | None:
    """`FILE, line N` where the key is not written in the scenario itself but in the preset
    file its section names (the scenario's own key overrides the preset's)."""
    section, _, rest = path.partition(".")
    if section not in files or not rest or path in lines:
        return None
    name, preset_lines = files[section]
    line = line_of(rest, preset_lines)
    return None if line is None else f"{name}, line {line}"


@contextlib.contextmanager
def lines_from(text: str) -> Iterator[None]:
    """Within it, an InputError about the file whose text is `text` is raised again with
    the line of each problem's key (`with_lines`)."""
    try:
        yield
    except InputError as exc:
        raise with_lines(exc, text) from None


def line_of(path: str, lines: dict[str, int]) -> int | None:
    """The line of `path`'s key in `lines` (key_lines'), or of the nearest key above it."""
    parts = path.split(".") if path else []
    while parts:
        line = lines.get(".".join(parts))
        if line is not None:
            return line
        parts.pop()
    return None
