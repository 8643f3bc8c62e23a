# phaselog — the two commands a newcomer needs: `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint typecheck bench docs clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)  ## run the ticket pipeline, kill it in phase 3, resume it, show the history
	$(BIN)/python examples/demo.py

test: $(STAMP)  ## every test (real files, real fsync, real processes)
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)  ## print benchmark figures (medians and ratios to baselines measured in the same run)
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python -m bench

docs: $(STAMP)  ## regenerate docs/cli-reference.md from --help
	$(BIN)/python docs/gen_cli_reference.py > docs/cli-reference.md
	$(BIN)/python scripts/gen_manifest_json.py

clean:
	rm -rf $(VENV) .demo .pytest_cache .hypothesis
