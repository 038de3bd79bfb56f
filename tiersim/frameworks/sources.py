"""Where an imported scenario's values came from: each mapped key's config file and key, by
its scenario path (`Mapped.sources`, merged over the files by frameworks.assemble), and a
problem found on the scenario built from them said at the key it came from."""

from __future__ import annotations

from pathlib import Path

from tiersim.core.errors import InputError, Problem


def sourced(exc: InputError, sources: dict[str, str], paths: list[Path], last: str) -> InputError:
    """`exc` with each problem at a mapped key (or inside one: a value built from several
    keys) saying the config key it came from; headed by the config file where every problem
    came from one (else `exc`'s own head, each problem naming its file)."""
    said = [_source_of(p.path, sources) for p in exc.problems]
    files = {origin(s, paths, last)[0] if s is not None else None for s in said}
    one = files.pop() if len(files) == 1 else None
    problems = []
    for p, s in zip(exc.problems, said, strict=True):
        where = s if one is None or s is None else origin(s, paths, last)[1]
        problems.append(p if s is None else Problem(p.path, f"{p.message} (from {where})", p.code))
    return InputError(one or exc.source, problems)


def _source_of(path: str, sources: dict[str, str]) -> str | None:
    """Where the value at `path` came from: its own source, else its nearest mapped parent's,
    else, for a section (`model`: a check across its keys), its keys' one source where they
    all have the same (Megatron's model flags); a --set of a key removes its source
    (`import_configs`): a section a --set wrote into has none."""
    keys = path.split(".")
    for end in range(len(keys), 0, -1):
        if ".".join(keys[:end]) in sources:
            return sources[".".join(keys[:end])] or None  # "": a --set's
    inside = {said for key, said in sources.items() if key.startswith(f"{path}.")}
    return inside.pop() if len(inside) == 1 and "" not in inside else None


def origin(said: str, paths: list[Path], source: str) -> tuple[str, str]:
    """(file, key) of a merged source, 'FILE: KEY' (the note names the file once)."""
    for path in map(str, paths):
        if said.startswith(f"{path}: "):
            return path, said[len(path) + 2 :]
    return source, said
