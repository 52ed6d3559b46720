# Lattice: the two commands are `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
RUNTIME := $(VENV)/.installed-runtime
DEV     := $(VENV)/.installed-dev
# Every dependency, transitive ones too, pinned with its hashes (make lock writes them).
LOCK     := requirements/lock.txt
DEV_LOCK := requirements/dev-lock.txt
PIP_COMPILE := $(BIN)/pip-compile --quiet --generate-hashes --strip-extras --no-emit-index-url \
               --no-emit-find-links --allow-unsafe

.PHONY: install run test lint typecheck pytest audit lock bench clean

$(VENV)/bin/python:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Lattice needs Python 3.11 (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# `make run` needs only what Lattice runs on; `make test` adds the test and lint tools.
# The locked dependencies first (hashes checked), then Lattice itself with nothing more.
$(RUNTIME): pyproject.toml $(LOCK) | $(VENV)/bin/python
	$(BIN)/pip install --quiet --require-hashes -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps -e .
	@touch $(RUNTIME)

$(DEV): pyproject.toml $(DEV_LOCK) | $(VENV)/bin/python
	$(BIN)/pip install --quiet --require-hashes -r $(DEV_LOCK)
	$(BIN)/pip install --quiet --no-deps -e .
	@touch $(DEV) $(RUNTIME)

install: $(DEV)

# Embedded (scripts/run.sh) by default; with DATABASE_URL and REDIS_URL, the Procfile's services.
run: $(RUNTIME)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	@mkdir -p var
	@if [ -n "$$DATABASE_URL" ] && [ -n "$$REDIS_URL" ]; then \
	  procs="web worker evaluator beat agents"; [ "$${LATTICE_DEMO_TRAFFIC:-1}" = 1 ] && procs="$$procs traffic"; \
	  echo "Lattice on http://$${LATTICE_HOST:-127.0.0.1}:$${LATTICE_PORT:-8000}/ (operator / lattice-operator, demo only)"; \
	  PATH="$(abspath $(BIN)):$$PATH" exec $(BIN)/honcho --procfile Procfile start $$procs; \
	else exec scripts/run.sh; fi

lint: $(DEV)
	$(BIN)/ruff check .

typecheck: $(DEV)
	$(BIN)/mypy

pytest: $(DEV)
	$(BIN)/pytest

test: lint typecheck pytest

# Known vulnerabilities in every locked dependency (PyPI's advisory service: needs the network,
# and fails when it cannot ask). .ci/run runs it after make test.
audit: $(DEV)
	$(BIN)/pip-audit --strict --progress-spinner off --disable-pip --require-hashes -r $(LOCK) -r $(DEV_LOCK)

# Write both locks again from pyproject.toml (after changing a pin there).
lock: $(DEV)
	$(PIP_COMPILE) --extra run --output-file $(LOCK) pyproject.toml
	$(PIP_COMPILE) --extra run --extra dev --output-file $(DEV_LOCK) pyproject.toml

bench: $(RUNTIME)
	$(BIN)/python bench/decision.py

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
