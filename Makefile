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

.PHONY: install verify test bench bench-compare install-peers clean

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
		--impl=$(IMPL) --ncm-report-dir=$(REPORTS) || status=$$?; \
	rm -rf $(REPORTS)/mutants $(REPORTS)/mutants.json $(REPORTS)/calibration $(REPORTS)/calibration.json; \
	NCM_VERIFY_SELFTEST_DIR=$(REPORTS) $(PYTEST) tests -m teeth -q -n $(JOBS) || [ $$status -ne 0 ] || status=1; \
	$(PY) -m ncm_verify report --reports $(REPORTS) || [ $$status -ne 0 ] || status=1; \
	exit $$status

# The suite's own tests (ledger, report, cache files, configs), then the main job.
test: install
	$(PYTEST) tests -m "not teeth" -q -n $(JOBS)
	$(MAKE) verify

# C9, measured and never asserted: kernel steps beside peers and floors, cache speedups beside
# C4's prediction, side by side in one run (GRID=full for the whole grid). `make install-peers`
# adds transformers' step as a peer; without it that column says it was skipped.
GRID ?= quick
BASELINE ?= benchmarks/baseline.json
THRESHOLD ?= 0.6

bench: install
	@mkdir -p $(REPORTS)
	$(PY) -m ncm_verify.bench run --impl $(IMPL) --grid $(GRID) --out $(REPORTS)/bench.json
	@if ls benchmarks/test_*.py >/dev/null 2>&1; then \
		$(PYTEST) benchmarks -q --benchmark-only --benchmark-json=$(REPORTS)/bench-pytest.json; fi

# Fails when a ratio of the last `make bench`, averaged (geometric mean) over a kind of case, is worse
# than the baseline's by a factor above 1 + THRESHOLD; ratios, not times, because both sides of a ratio
# share the machine's noise (two runs of one commit under load 14 on 2 cores: at most 1.5x apart).
# Save a new baseline with `cp $(REPORTS)/bench.json $(BASELINE)`.
bench-compare: install
	@[ -f $(REPORTS)/bench.json ] || $(MAKE) bench
	$(PY) -m ncm_verify.bench compare $(BASELINE) $(REPORTS)/bench.json --threshold $(THRESHOLD)

# PyPI's Linux torch wheel pulls CUDA packages (GBs): install a CPU build of torch first where one
# is at hand (a local wheel); pip then keeps it.
install-peers: install
	$(PY) -m pip install --quiet -e '.[peers]'

clean:
	rm -rf $(REPORTS) .hypothesis .benchmarks
