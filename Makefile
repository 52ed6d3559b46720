# Lattice: the two commands are `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
RUNTIME := $(VENV)/.installed-runtime
DEV     := $(VENV)/.installed-dev

.PHONY: install run test lint typecheck pytest bench clean

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Lattice needs Python 3.11 (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# `make run` needs only what Lattice runs on; `make test` adds the test and lint tools.
$(RUNTIME): pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install --quiet -e .
	@touch $(RUNTIME)

$(DEV): pyproject.toml | $(VENV)/bin/python
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(DEV) $(RUNTIME)

install: $(DEV)

run: $(RUNTIME)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	@scripts/run.sh

lint: $(DEV)
	$(BIN)/ruff check .

typecheck: $(DEV)
	$(BIN)/mypy

pytest: $(DEV)
	$(BIN)/pytest

test: lint typecheck pytest

bench: $(RUNTIME)
	$(BIN)/python bench/decision.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
