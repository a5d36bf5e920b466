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

.PHONY: install verify test bench clean

$(VENV)/installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

install: $(VENV)/installed

# Every property, derandomized under the `ci` profile; the report is written
# even when a property fails, and the exit status is the properties'.
verify: install
	@status=0; HYPOTHESIS_PROFILE=$(PROFILE) $(PYTEST) properties -q -n $(JOBS) \
		--impl=$(IMPL) --ncm-report-dir=$(REPORTS) || status=$$?; \
	$(PY) -m ncm_verify report --reports $(REPORTS) || [ $$status -ne 0 ] || status=1; \
	exit $$status

test: install
	$(PYTEST) tests -q -n $(JOBS)
	$(MAKE) verify

bench: install
	@mkdir -p $(REPORTS)
	$(PYTEST) benchmarks -q --benchmark-only --benchmark-json=$(REPORTS)/bench.json

clean:
	rm -rf $(REPORTS) .hypothesis .benchmarks
