PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup test lint bench bench-quick stress example example-mpi bench-mpi clean freethreaded test-ft stress-ft bench-ft

# Free-threaded CPython 3.13t (GIL disabled): see tools/build_freethreaded.sh. The venv lives in
# $(FT_CACHE); the interpreter build is cached per machine (FT_BUILD_CACHE, ~/.cache/...).
FT_CACHE ?= .cache/freethreaded
export FT_CACHE
FT_PY = $(abspath $(FT_CACHE))/venv/bin/python
# PYTHON_GIL=0 would force the GIL off even past an extension that needs it: never inherit it.
FT_RUN = env -u PYTHON_GIL $(FT_PY)

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,mpi]'
	touch $@

# PARITY=1: install the [parity] extra (torch, CPU build) first, so the tests that compare
# values, gradients and dtypes with PyTorch run instead of skipping (CI does this once).
$(VENV)/.parity: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[parity]'
	touch $@

# `make setup [PARITY=1]`: only the install (CI installs once, then runs test steps side by side)
setup: $(VENV)/.installed $(if $(PARITY),$(VENV)/.parity)

test: setup
	$(if $(PARITY),PA_REQUIRE_TORCH=1) $(PY) -m pytest $(PYTEST_ARGS)

# ruff with pyproject's rules ([tool.ruff.lint]); the [lint] extra installs the pinned ruff.
$(VENV)/.lint: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[lint]'
	touch $@

lint: $(VENV)/.lint
	$(PY) -m ruff check .

# The [compare] extra (matplotlib) is installed for the plot the summary names.
# The PyTorch columns need torch in .venv: `make bench TORCH=1` installs the [parity] extra
# (torch's CPU build) first; without torch the report says so and how to get them.
# SCIENTIFIC=1 installs the [scientific] extra (JAX, HIPS autograd: the float64 scientific
# rows' columns, optional like torch's).
# BENCH_ARGS: more options, e.g. BENCH_ARGS="--check --out bench.json". Then the data-parallel
# part on 2 MPI ranks (stress/compare/mpi.py; BENCH_MPI_ARGS, e.g. "--out mpi.json").
bench: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[compare]'
	$(if $(TORCH),$(PY) -m pip install --quiet -e '.[parity]')
	$(if $(SCIENTIFIC),$(PY) -m pip install --quiet -e '.[scientific]')
	$(PY) -m stress.compare $(BENCH_ARGS)
	$(MPIEXEC) -n 2 $(PY) -m stress.compare.mpi $(BENCH_MPI_ARGS)

bench-quick: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[compare]'
	$(if $(TORCH),$(PY) -m pip install --quiet -e '.[parity]')
	$(if $(SCIENTIFIC),$(PY) -m pip install --quiet -e '.[scientific]')
	$(PY) -m stress.compare --quick $(BENCH_ARGS)
	$(MPIEXEC) -n 2 $(PY) -m stress.compare.mpi --quick $(BENCH_MPI_ARGS)

# Training on scikit-learn's bundled 8x8 digits (no download): an MLP and a CNN with
# pa.nn, pa.optim.Adam and the parallel engine; fails if test accuracy ends under 95%.
example: $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[examples]'
	$(PY) examples/train_digits.py --model mlp
	$(PY) examples/train_digits.py --model cnn

# Data-parallel training over MPI on this machine (loopback only: UCX limited to shared
# memory, so no endpoint but shared memory exists): 2 ranks, then 4, each checked against one
# process on the whole batch (examples/train_ddp.py --check).
MPI_ENV = UCX_TLS=self,sm UCX_NET_DEVICES=lo
MPIEXEC = $(MPI_ENV) timeout 300 $(VENV)/bin/mpiexec
example-mpi: $(VENV)/.installed
	$(MPIEXEC) -n 2 $(PY) examples/train_ddp.py --model mlp --check
	$(MPIEXEC) -n 2 $(PY) examples/train_ddp.py --model cnn --check
	$(MPIEXEC) -n 4 $(PY) examples/train_ddp.py --model cnn --check --bucket-cap-mb 0.02

# The MPI benchmark (docs/benchmarks.md, "Data parallel"): all-reduce throughput, the share of
# communication hidden behind the backward, a merged timeline, the scaling model.
bench-mpi: $(VENV)/.installed
	$(MPIEXEC) -n 2 $(PY) -m stress.compare.mpi $(BENCH_MPI_ARGS)

stress: $(VENV)/.installed
	$(PY) -m stress --duration 60

# Builds (first time, a few minutes) or reuses the ft interpreter and its venv, reinstalls the
# package; the last line printed is the venv's interpreter.
freethreaded:
	@bash tools/build_freethreaded.sh

test-ft: freethreaded
	$(FT_RUN) -m pytest $(PYTEST_ARGS)

stress-ft: freethreaded
	$(FT_RUN) -m stress --duration 60

# The comparison on the GIL build ($(PY)) and the free-threaded one ($(FT_PY), found through
# the exported FT_CACHE) side by side: each workload in a child of each, interleaved.
# Extra arguments: make bench-ft BENCH_FT_ARGS=--quick
bench-ft: $(VENV)/.installed freethreaded
	$(PY) -m stress.compare --python ft $(BENCH_FT_ARGS)

clean:
	rm -rf $(VENV) $(FT_CACHE)/venv build *.egg-info
