"""YAML input, bounded: the safe loader only, no key given twice, and limits on what is read.

A file is read only if it is a regular file of at most `limits.YAML_BYTES`; while it is
composed its nesting is bounded (`limits.NESTING`: every reader after this one recurses), and
before any value is built the size it would have with every alias expanded is counted
(`limits.YAML_NODES`: nine levels of nine aliases are 9^9 values, "billion laughs") and an
alias inside its own anchor (a recursive structure) is refused. An integer literal of more
than `limits.INT_DIGITS` digits is refused too (Python will not convert 4,300 or more).

A plain text is read by libyaml (`fast_enough`: a tenth of the time, the same values); where
it finds anything wrong, or the text is not plain, the pure-Python reader reads it and
says what is wrong.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from tiersim.core import limits
from tiersim.core.collector import collector_paused
from tiersim.core.errors import InputError, Problem, shown
from tiersim.core.files import FileProblem, read_regular_file


class YamlLimitError(yaml.MarkedYAMLError):
    """A YAML document over one of the bounds above (not a syntax error: the text may be valid)."""


class _Bounded:
    """The safe loader's construction, refusing a key given twice in one mapping (plain YAML
    keeps the last, silently dropping the first: a scenario would not run what its file
    says), and bounded (`_check_expanded`)."""

    _max_nodes: int
    _max_depth: int
    _within: bool = False  # the text alone shows it within both bounds (`within_bounds`)

    def construct_document(self, node: yaml.Node) -> Any:
        if not self._within:
            _check_expanded(node, self._max_nodes, self._max_depth)
        return super().construct_document(node)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """A value, where a tag names a type its text is not (`!!float x`, `!!bool maybe`,
        `!!timestamp 5`) a ConstructorError at the value, not the ValueError, KeyError or
        AttributeError PyYAML's constructor lets out."""
        try:
            return super().construct_object(node, deep)
        except (ValueError, LookupError, AttributeError, ArithmeticError) as exc:
            if isinstance(exc, yaml.YAMLError):
                raise
            tag = node.tag.removeprefix("tag:yaml.org,2002:")
            given = shown(node.value) if isinstance(node, yaml.ScalarNode) else f"a {node.id}"
            expected = _TAGGED.get(tag, f"what the tag !!{tag} allows")
            what = f"{given} tagged !!{tag} (expected {expected})"
            raise yaml.constructor.ConstructorError(None, None, what, node.start_mark) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if not isinstance(node, yaml.MappingNode):  # `!!map x`: the base loader says what is
            return super().construct_mapping(node, deep)
        first: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *base` merges; keys given beside it override, as meant
            key = self.construct_object(key_node, deep=True)
            try:
                seen = first.setdefault(key, key_node)
            except TypeError:  # an unhashable key: the base loader says what is wrong
                continue
            if seen is not key_node:
                line = seen.start_mark.line + 1
                where = "on the same line" if line == key_node.start_mark.line + 1 else ""
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {shown(key)} (first given {where or f'on line {line}'})",
                    key_node.start_mark,
                )
        return super().construct_mapping(node, deep)


class _UniqueKeyLoader(_Bounded, yaml.SafeLoader):
    """The pure-Python safe loader, bounded while it composes too: what says what is wrong."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0
        self._max_depth = limits.NESTING.value()
        self._max_nodes = limits.YAML_NODES.value()

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > self._max_depth:
                raise YamlLimitError(
                    problem=_too_deep(self._max_depth), problem_mark=self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def scan_flow_scalar(self, style: str) -> yaml.Token:
        """A quoted scalar; an escape of no Unicode character (`"\\U01e300C5"`, past U+10FFFF)
        a syntax error at its digits, as libyaml says it, not the ValueError (or, for more than
        31 bits, OverflowError) Python's chr() raises inside PyYAML's scanner."""
        start = self.get_mark()
        try:
            return super().scan_flow_scalar(style)
        except (ValueError, OverflowError):  # only a \\U escape's 8 digits can be past it
            what = (
                f"found an escape \\U{self.prefix(8)} of no Unicode character (expected at "
                "most \\U0010FFFF, the last code point)"
            )
            raise yaml.scanner.ScannerError(
                "while scanning a double-quoted scalar", start, what, self.get_mark()
            ) from None


# what a value a tag names a type of must look like
_TAGGED = {
    "int": "an integer, such as 12",
    "float": "a number, such as 1.5 or 2e-3",
    "bool": "true or false",
    "timestamp": "a date, such as 2024-05-01",
}


def _bounded_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    if len(node.value) <= limits.INT_DIGITS:  # no more digits than characters: not counted
        return loader.construct_yaml_int(node)
    digits = sum(c.isdigit() for c in node.value)
    if digits > limits.INT_DIGITS:
        what = f"an integer of {digits:,} digits (expected at most {limits.INT_DIGITS} digits)"
        raise YamlLimitError(problem=what, problem_mark=node.start_mark)
    return loader.construct_yaml_int(node)


class _FastLoader(_Bounded, yaml.CSafeLoader):
    """The same document read by libyaml (a tenth of the pure-Python reader's time), the
    constructor the same Python code; only for a text `fast_enough` allows, and any error
    it finds said again by `_UniqueKeyLoader`, in its words."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._max_depth = limits.NESTING.value()
        self._max_nodes = limits.YAML_NODES.value()
        self._within = within_bounds(stream, self._max_nodes, self._max_depth)


def within_bounds(text: str, max_nodes: int, max_depth: int) -> bool:
    """Whether `text` holds at most `max_nodes` values and `max_depth` levels, whatever it
    says, so that `_check_expanded` need not walk it: without an alias (`*`) nothing is
    expanded or recursive, every value but the first comes with one of `-:,[{?` (one of
    them brings at most three: a flow collection, or a pair, and the pair's key and value),
    and every level of nesting needs one of its own (or, where there are more of them than
    levels allowed, as in a long file of keys, `indent_bound`)."""
    if "*" in text:
        return False
    marks = sum(map(text.count, "-:,[{?"))
    if 3 * marks + 1 > max_nodes:
        return False
    return marks + 1 <= max_depth or indent_bound(text) <= max_depth


for _loader in (_UniqueKeyLoader, _FastLoader):
    _loader.add_constructor("tag:yaml.org,2002:int", _bounded_int)

# where a block scalar may begin: its `|` or `>` at a line's start or after a space
_BLOCK_SCALAR = re.compile(r"(?:^|\s)[|>]")

# libyaml composes nodes by recursion in C, with no bound of its own: it is given a text only
# where `nesting_bound` says it is no deeper than this (its `TIERSIM_MAX_NESTING` bound is
# checked after composing, `_check_expanded`, and a deeper text is read again in Python)
_FAST_DEPTH = 2_000


def nesting_bound(text: str) -> int:
    """A bound on the levels `text` nests (a scalar is one), counted without parsing: the
    lower of 1 + its count of `-:[{?`, every level but the root's needing one of them (a
    block sequence's item, a mapping's value, a flow collection, an explicit key), and
    `indent_bound` (the one a long file of keys is within: a 1 MiB scenario of 76,000 keys
    has 76,000 `:` and is two levels deep)."""
    by_marks = 1 + sum(map(text.count, "-:[{?"))
    return by_marks if by_marks <= _FAST_DEPTH else min(by_marks, indent_bound(text))


def indent_bound(text: str) -> int:
    """A bound on the levels `text` nests, its deepest indent counted. A level is the
    root or a collection on the way to a scalar: a flow collection needs a `[` or `{`, or is
    a pair inside one (`[a: b]`); a block sequence needs a `-`; a block mapping begins after
    a `-` or `?` on its line (`- a: 1`), or at a line's indent, deeper than any block
    mapping it is inside of (so one at each indent, at most). Each `-[{?` then brings at
    most two levels, the indents from 0 to the deepest one, and the scalar one more."""
    indent = max((len(line) - len(line.lstrip(" ")) for line in text.splitlines()), default=0)
    return 2 + indent + 2 * sum(map(text.count, "-[{?"))


def fast_enough(text: str, any_size: bool = False) -> bool:
    """Whether libyaml may read `text`: printable characters only (as the pure-Python reader
    allows), shallow (`nesting_bound`), and none of the characters around which the two
    readers were seen to differ (tests/test_yaml_fast.py's random texts): a tab, a tag (`!`:
    a bare `!` on an empty value is '' to libyaml, None to the pure-Python reader), `?`
    (libyaml takes `[15?]` and `[-?]` as strings, the pure-Python reader refuses them) and
    where a block scalar's `|` or `>` may be (libyaml takes `|#` as one). `any_size`: those
    checks alone (a caller that bounds the nesting itself: tiersim.config.yamllines)."""
    if any(c in text for c in "\t!?") or yaml.reader.Reader.NON_PRINTABLE.search(text):
        return False
    if _BLOCK_SCALAR.search(text):
        return False
    return any_size or nesting_bound(text) <= _FAST_DEPTH


def _too_deep(levels: int) -> str:
    return (
        f"nested more than {levels} levels deep (a scenario is 5 deep; "
        f"{limits.NESTING.env} raises the bound)"
    )


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _check_expanded(root: yaml.Node, max_nodes: int, max_depth: int) -> None:
    """Refuse a document whose values, aliases expanded, exceed `max_nodes` values or
    `max_depth` levels, or that holds an alias to a collection it is inside of. Each node is
    visited once (sizes of shared nodes are remembered), without recursion."""
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_now: set[int] = set()  # the nodes on the current path from the root
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            kids = _children(node)
            size[key] = 1 + sum(size[id(k)] for k in kids)
            depth[key] = 1 + max((depth[id(k)] for k in kids), default=0)
            open_now.discard(key)
            if size[key] > max_nodes:
                what = (
                    f"{size[key]:,}+ values once its aliases are expanded (expected at most "
                    f"{max_nodes:,}; {limits.YAML_NODES.env} raises the bound)"
                )
                raise YamlLimitError(problem=what, problem_mark=node.start_mark)
            if depth[key] > max_depth:
                raise YamlLimitError(problem=_too_deep(max_depth), problem_mark=node.start_mark)
            continue
        if key in size:
            continue
        if key in open_now:
            what = "an alias refers to a collection it is inside of (a recursive structure)"
            raise YamlLimitError(problem=what, problem_mark=node.start_mark)
        open_now.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in _children(node) if id(k) not in size)


def parse_yaml(text: str) -> Any:
    """YAML text to Python objects: safe tags only, no key given twice, bounded. Read by
    libyaml where it may be (`fast_enough`); where it finds anything wrong, the pure-Python
    reader reads it again and says what (with its marks and words)."""
    if yaml.__with_libyaml__ and fast_enough(text):
        try:
            # a node and a value for each of up to `limits.YAML_NODES` values, all kept to
            # the end: the collector's passes over them are a quarter of a long file's read
            with collector_paused():
                return yaml.load(text, Loader=_FastLoader)  # a CSafeLoader: safe tags only
        except Exception:  # anything at all: the pure-Python reader's verdict is the one given
            pass
    return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: safe tags only


# libyaml's parser and emitter, where PyYAML was built with them (pure Python otherwise): the
# same safe tags and values, 4-11x faster (docs/startup.md)
_FAST_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_FAST_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def parse_shipped_yaml(text: str) -> Any:
    """YAML that tiersim ships (its presets), not a user's: libyaml's parser, without the
    bounds and checks parse_yaml keeps for a user's file (a default run's four presets: 13.9 ms
    of CPU through parse_yaml, 1.2 ms so). tests/test_startup_yaml.py checks that every shipped
    preset reads the same both ways, and so has no key given twice."""
    return yaml.load(text, Loader=_FAST_LOADER)  # a safe loader: safe tags only


def dump_yaml(data: Any) -> str:
    """`data` as block YAML, its keys in their order, non-ASCII text kept: what
    yaml.safe_dump writes (tests/test_startup_yaml.py compares them), with libyaml's emitter."""
    return yaml.dump(data, Dumper=_FAST_DUMPER, sort_keys=False, allow_unicode=True)


def yaml_problem(exc: yaml.YAMLError, text: str = "") -> str:
    """What is wrong, where: `YAML syntax error at line 3, column 5: ...` (`text`: the
    document, to place a character YAML refuses, which PyYAML gives by offset alone)."""
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow
        return _refused_character(exc, text)
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    what = getattr(exc, "problem", None) or "; ".join(str(exc).split("\n"))
    if isinstance(exc, YamlLimitError):
        return f"at {where}{what}"
    return f"YAML syntax error at {where}{what}{_context(exc)}{_hint(what)}"


def _refused_character(exc: yaml.reader.ReaderError, text: str) -> str:
    """`YAML syntax error at line 1, column 8: character U+0000 (a NUL byte) is not allowed
    in YAML`: the line and column from the offset, where the text is known."""
    at = exc.position
    char = exc.character if isinstance(exc.character, str) else chr(exc.character)
    name = " (a NUL byte)" if char == "\0" else ""
    what = (
        f"character U+{ord(char):04X}{name} is not allowed in YAML (only printable characters, "
        "tabs and line breaks are)"
    )
    if not text or at > len(text):
        return f"YAML syntax error at character {at + 1}: {what}"
    line = text.count("\n", 0, at)
    column = at - (text.rfind("\n", 0, at) + 1)
    return f"YAML syntax error at line {line + 1}, column {column + 1}: {what}"


def _context(exc: yaml.YAMLError) -> str:
    """Where the construct the error is in began, when that is another line (an unclosed
    `{` is found only at the end of the file)."""
    mark, context = getattr(exc, "context_mark", None), getattr(exc, "context", None)
    problem_mark = getattr(exc, "problem_mark", None)
    if mark is None or not context or (problem_mark and problem_mark.line == mark.line):
        return ""
    return f" ({context} that starts at line {mark.line + 1}, column {mark.column + 1})"


# the likely mistake behind PyYAML's words for the errors people make most
_HINTS = {
    "found character '\\t' that cannot start any token": "a tab where YAML allows only "
    "spaces: indent with spaces",
    "mapping values are not allowed here": "expected a key indented as the keys beside it, or "
    "a value holding ': ' in quotes",
}


def _hint(what: str) -> str:
    hint = _HINTS.get(what)
    return f" ({hint})" if hint else ""


def read_yaml(path: Path, source: str) -> Any:
    """The YAML file at `path` as Python objects; InputError (naming `source`) otherwise."""
    return read_yaml_and_text(path, source)[0]


def read_yaml_and_text(path: Path, source: str) -> tuple[Any, str]:
    """The YAML file at `path` as Python objects, and its text (for the lines of keys an
    error names: tiersim.config.yamllines)."""
    try:
        data = read_regular_file(path, limits.YAML_BYTES.value(), "a YAML file")
    except FileProblem as exc:
        hint = f"; {limits.YAML_BYTES.env} raises the bound" if "larger" in str(exc) else ""
        raise InputError(source, [Problem("", f"{exc}{hint}", "E-FILE")]) from None
    except FileNotFoundError:  # where a relative path was looked for, said
        where = str(path.absolute())
        at = "" if where == source else f" at {where}"
        why = f"file not found (expected a YAML file{at})"
        raise InputError(source, [Problem("", why, "E-FILE")]) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        why = getattr(exc, "strerror", None) or exc
        raise InputError(source, [Problem("", f"cannot read: {why}", "E-FILE")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"byte {exc.start}"
        raise InputError(
            source, [Problem("", f"not UTF-8 text ({where}: {exc.reason})", "E-FILE")]
        ) from None
    if not text.strip():
        raise InputError(source, [Problem("", "file is empty (expected a YAML mapping)", "E-YAML")])
    try:
        return parse_yaml(text), text
    except yaml.YAMLError as exc:
        raise InputError(source, [Problem("", yaml_problem(exc, text), "E-YAML")]) from None
    except RecursionError:  # a bound raised past what this interpreter's stack takes
        raise InputError(
            source, [Problem("", _too_deep(limits.NESTING.value()), "E-YAML")]
        ) from None
