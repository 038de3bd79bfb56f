# Everything runs from a project-local virtualenv so a fresh machine needs only Python and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test lint format bench docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e .
	touch $@

# torch==2.13.0 is pinned in the `measure` extra: pip takes the CPU build, never a GPU one.
# One install of the package with its extras (the base install is part of it: its stamp is
# touched too), not the base first and the extras after (a second resolve and editable build).
# --no-compile: pip would byte-compile every module of every package it installs, one at a
# time (12,500 files, most of them transformers' models and sympy's, which the suite never
# imports); `make test` writes the compiled modules the suite does import as it first imports
# them (PYTHONDONTWRITEBYTECODE emptied below), so each is compiled once all the same.
$(TEST_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --no-compile -e '.[test,dask,measure]'
	touch $(STAMP) $@

demo: $(STAMP)
	$(BIN)/tiersim run scenarios/default.yaml

# PYTHONDONTWRITEBYTECODE emptied: the suite's Python processes (a few dozen CLI and sweep
# subprocesses) load tiersim's compiled modules from __pycache__ instead of compiling its
# source each time (an environment that sets it had every one compile it again).
# The suite on TEST_WORKERS processes (pytest-xdist, in the test extra; CI has 2 cores), whole
# test files to a worker so that each module's shared runs are made once (tests/conftest.py);
# `make test TEST_WORKERS=0` runs it in this one process (docs/suite-time.md).
TEST_WORKERS ?= 2
test: $(TEST_STAMP)
	$(BIN)/ruff check tiersim tests benchmarks
	$(BIN)/ruff format --check tiersim tests benchmarks
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

lint: $(TEST_STAMP)
	$(BIN)/ruff check tiersim tests benchmarks
	$(BIN)/ruff format tiersim tests benchmarks

# the reference pages made from the parsers and the schema (tests fail when they are stale)
docs: $(STAMP)
	$(BIN)/python -m tiersim.cli.reference

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_engine.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
