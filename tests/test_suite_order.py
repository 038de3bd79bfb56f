"""tests/conftest.py's collection under pytest-xdist: the second worker imports the test files
last-first before collecting them (`pytest_collection`, docs/suite-time.md), by the names
pytest gives them, so that its collection finds them imported instead of importing them
again."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from conftest import files_to_collect

HERE = Path(__file__).resolve().parent


def _config(*args: str, cwd: Path = HERE.parent) -> SimpleNamespace:
    """What files_to_collect reads of pytest's config: the run's arguments and where it ran."""
    return SimpleNamespace(args=list(args), invocation_params=SimpleNamespace(dir=cwd))


def test_the_files_to_collect_are_the_arguments_test_files_in_pytests_order():
    every = files_to_collect(_config("tests"))
    assert every == sorted(HERE.glob("test_*.py")) and HERE / "test_suite_order.py" in every
    named = files_to_collect(
        _config("tests/test_layout.py::test_no_import_cycle", "tests/test_api.py")
    )
    assert named == [HERE / "test_layout.py", HERE / "test_api.py"]
    assert files_to_collect(_config("test_api.py", cwd=HERE)) == [HERE / "test_api.py"]
    assert files_to_collect(_config("benchmarks", "tests/conftest.py")) == []  # no test file here


def test_pytest_imports_a_test_file_by_its_stem():
    """The name the pre-pass imports each file by (`--import-mode prepend`, tests/ not a
    package): under another name its collection would import the file a second time."""
    assert __name__ == Path(__file__).stem
