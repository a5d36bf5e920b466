# The README's two commands: `make verify` (the main job) and `make test`.
# Each creates .venv and installs the project when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
IMPL ?= ncm_verify.reference
PROFILE ?= ci
REPORTS ?= reports
JOBS ?= 2
# `make verify SEED=123` redraws the derandomized profile's examples from seed 123.
SEED ?=
PYTEST := $(PY) -m pytest

.PHONY: install verify test bench clean

$(VENV)/installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

install: $(VENV)/installed

# Every property, derandomized under the `ci` profile, then the teeth self-tests
# (planted bugs caught, calibration) whose verdicts the report shows. The report
# is written even when something fails; the exit status is the worst of the runs.
verify: install
	@status=0; HYPOTHESIS_PROFILE=$(PROFILE) $(PYTEST) properties -q -n $(JOBS) \
		--impl=$(IMPL) --ncm-report-dir=$(REPORTS) $(if $(SEED),--hypothesis-seed=$(SEED)) || status=$$?; \
	rm -rf $(REPORTS)/mutants $(REPORTS)/mutants.json $(REPORTS)/calibration $(REPORTS)/calibration.json; \
	NCM_VERIFY_SELFTEST_DIR=$(REPORTS) $(PYTEST) tests -m teeth -q -n $(JOBS) || [ $$status -ne 0 ] || status=1; \
	$(PY) -m ncm_verify report --reports $(REPORTS) || [ $$status -ne 0 ] || status=1; \
	exit $$status

# The suite's own tests (ledger, report, cache files, configs), then the main job.
test: install
	$(PYTEST) tests -m "not teeth" -q -n $(JOBS)
	$(MAKE) verify

bench: install
	@mkdir -p $(REPORTS)
	$(PYTEST) benchmarks -q --benchmark-only --benchmark-json=$(REPORTS)/bench.json

clean:
	rm -rf $(REPORTS) .hypothesis .benchmarks
