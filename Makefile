# phaselog — the two commands a newcomer needs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The dev/CI environment is installed from this lock (pip constraints), so a fresh clone gets what was
# tested; `make lock` refreshes it from pyproject.toml's ranges, scripts/check_lock.py checks it (CI).
LOCK := requirements-dev.lock

.PHONY: demo test lint typecheck bench docs clean lock check-lock

$(STAMP): pyproject.toml $(LOCK)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c $(LOCK) -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)  ## run the ticket pipeline, kill it in phase 3, resume it, show the history; then a video DAG
	$(BIN)/python examples/demo.py

test: $(STAMP)  ## every test (real files, real fsync, real processes)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)  ## print benchmark figures (medians and ratios to baselines measured in the same run)
	$(BIN)/pip install --quiet -c $(LOCK) -e '.[bench]'
	$(BIN)/python -m bench

docs: $(STAMP)  ## regenerate docs/cli-reference.md from --help
	$(BIN)/python docs/gen_cli_reference.py > docs/cli-reference.md
	$(BIN)/python scripts/gen_manifest_json.py

lock: $(STAMP)  ## refresh requirements-dev.lock from pyproject.toml's ranges (newest versions), then re-test
	$(BIN)/pip-compile --quiet --all-extras --strip-extras --no-emit-index-url --no-emit-find-links \
		--unsafe-package phaselog --upgrade --output-file $(LOCK) pyproject.toml
	$(BIN)/python scripts/check_lock.py

check-lock: $(STAMP)  ## check that requirements-dev.lock pins every requirement of pyproject.toml in range
	$(BIN)/python scripts/check_lock.py

clean:
	rm -rf $(VENV) .demo .pytest_cache .hypothesis
