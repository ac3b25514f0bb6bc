# seqrec: `make fit` trains the embedded default, `make test` runs the tests; both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# An unpinned torch pulls a multi-GB CUDA build: pin it first (this version also has a CPU wheel).
TORCH ?= torch==2.13.0
# Real-data tests and benchmarks read $SEQREC_SHARED_DATA (a folder of real dataset copies) when it is set;
# without it those tests skip with a message naming the variable.
CONFIG ?= configs/sasrec_ml100k.yaml

.PHONY: setup fit test test-fast lint bench repro clean golden

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet $(TORCH)
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed

fit: setup
	$(PY) -m seqrec fit --config $(CONFIG) $(ARGS)

# the tests run on every core (pytest-xdist: -n auto); PYTEST_ARGS="-n 0" runs them in one process
test: setup
	$(PY) -m pytest -q -n auto $(PYTEST_ARGS)

# the edit loop: every test but those marked slow (subprocess fits, faults, DDP, servers, benchmark smoke runs)
test-fast: setup
	$(PY) -m pytest -q -n auto -m "not slow" $(PYTEST_ARGS)

# golden: rewrite tests/fixtures/resolved_configs.json, every shipped experiment as it resolves (review the diff)
golden: setup
	$(PY) tests/fixtures/resolved_configs.py

lint: setup
	$(VENV)/bin/ruff check seqrec benchmarks tests

# bench: the pipeline benchmark, the speed benchmark (its ML-1M rows need SEQREC_SHARED_DATA; the official LRURec
# comparison runs when SEQREC_LRUREC_OFFICIAL names a checkout of github.com/yueqirex/LRURec), then the XLong-size
# benchmark on a synthetic corpus (66.8M events; about 5 minutes and 7 GiB). Run it on an otherwise quiet machine.
# The benchmarks are development tools outside the package (benchmarks/): python -m benchmarks.<name> from this folder.
bench: setup
	$(PY) -m benchmarks.pipeline --out results/BENCHMARKS.md $(ARGS)
	$(PY) -m benchmarks.speed --out results/BENCHMARKS.md $(if $(SEQREC_LRUREC_OFFICIAL),--official_lrurec "$(SEQREC_LRUREC_OFFICIAL)") $(SPEED_ARGS)
	$(PY) -m benchmarks.xlong --out results/BENCHMARKS.md

clean:
	rm -rf $(VENV) runs .pytest_cache

# Paper reproductions (hours on CPU): bounded sittings that resume, e.g. make repro ARGS="--sitting_time 00:02:00:00 --resume"
repro: setup
	$(PY) -m seqrec repro --out results/REPRODUCTION.md $(ARGS)
