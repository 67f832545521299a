# Two commands a new machine needs: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

.PHONY: run test install bench clean

# What the main job needs, and no more (the extras onnx, jax, rewrite, ray, hf and
# accelerate come with `make test` or `pip install -e '.[NAME]'`).
$(STAMP): pyproject.toml
	@echo "make: creating $(VENV) and installing graphopt (torch's CPU wheel first; a few minutes on a fresh machine)"
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch is pinned to the CPU wheel this machine carries; install it first so nothing pulls CUDA builds.
	@echo "make: installing torch==2.13.0"
	$(BIN)/pip install -q torch==2.13.0
	@echo "make: installing graphopt and its dependencies"
	$(BIN)/pip install -q -e .
	touch $(STAMP)

# The test suite's set: every extra, pytest and its plugins.
$(DEV_STAMP): $(STAMP)
	@echo "make: installing the test set (pytest, onnx, jax, egglog, ray, transformers, accelerate)"
	$(BIN)/pip install -q -e '.[dev]'
	touch $(DEV_STAMP)

install: $(STAMP)

# The main job: compare placement methods, GO's shipped policy among them, on GNMT-2's
# training step, two V100s of a DGX-1.
run: $(STAMP)
	$(BIN)/graphopt optimize zoo:gnmt-2 --methods single,expert,metis,m-etf,heft,sa,brkga,portfolio,go \
		--budget 1000 --out runs/gnmt-2

# CI has two cores; a test file runs whole on one worker (its fixtures and worker pools
# are per file). How long the suite takes depends on the machine and its load: 8.1 min
# (9.9 min with the install) on two workers of a 2-core machine at load average 2.8, on a
# fresh clone (2026-12-02). Time it with `time make test` and read `uptime`'s
# load average beside the figure.
# The simulator is compiled once first (about a minute on a fresh clone), so that the
# workers load it from numba's cache rather than both compiling it.
TEST_WORKERS ?= 2
test: $(DEV_STAMP)
	$(BIN)/python -c "from graphopt.sim import ensure_compiled; ensure_compiled()"
	# pytest exits 5 when it collects no test: not a failure of the code
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile; rc=$$?; [ $$rc -eq 5 ] && exit 0; exit $$rc

bench: $(STAMP)
	$(BIN)/python bench/sim_speed.py

clean:
	rm -rf $(VENV) runs
