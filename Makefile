# The README's two commands: `make verify` (the main job) and `make test`.
# Each creates .venv and installs the project when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
IMPL ?= ncm_verify.reference
PROFILE ?= ci
REPORTS ?= reports
JOBS ?= 2
PYTEST := $(PY) -m pytest

.PHONY: install verify test help bench clean

$(VENV)/installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

## install: create .venv and install the project into it
install: $(VENV)/installed

## verify: every property against IMPL (module name or file path), the self-tests (cached), the report
# One Python orchestrator runs the phases and owns the verdict: its exit status is the report's.
verify: install
	$(PY) -m ncm_verify verify --impl=$(IMPL) --profile=$(PROFILE) --reports=$(REPORTS) --jobs=$(JOBS)

## test: the suite's own tests (ledger, report, cache files, configs), then `make verify`
test: install
	$(PYTEST) tests -m "not teeth" -q -n $(JOBS)
	$(MAKE) verify

## help: list the targets and variables
help:
	@grep -E '^## ' $(MAKEFILE_LIST) | sed 's/^## /  make /'
	@echo "  variables: IMPL=$(IMPL) PROFILE=$(PROFILE) REPORTS=$(REPORTS) JOBS=$(JOBS); CI=true reruns the self-tests"

## bench: latency benchmarks (pytest-benchmark) into $(REPORTS)/bench.json
bench: install
	@mkdir -p $(REPORTS)
	$(PYTEST) benchmarks -q --benchmark-only --benchmark-json=$(REPORTS)/bench.json

## clean: remove reports (with the cached self-tests) and Hypothesis state
clean:
	rm -rf $(REPORTS) .hypothesis .benchmarks
