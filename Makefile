# `make train` and `make test` set up .venv on first use, then run.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# CPU wheel of torch unless told otherwise; point TORCH_INDEX_URL at
# https://download.pytorch.org/whl/cpu on a machine whose pip would pull CUDA wheels.
TORCH_INDEX_URL ?=
PIP_QUIET := --quiet --disable-pip-version-check

.PHONY: setup train test test-all test-kernels lint bench clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install $(PIP_QUIET) torch==2.13.0 $(if $(TORCH_INDEX_URL),--index-url $(TORCH_INDEX_URL)) 2>&1 | grep -v "is ignored" || true
	$(BIN)/python -c "import torch" 
	$(BIN)/pip install $(PIP_QUIET) -e '.[dev]' 2>&1 | grep -v "is ignored" || true
	$(BIN)/python -c "import cloudlstm, lightning, hydra, wandb, numba"
	touch $@

train: setup
	$(BIN)/python train.py experiment=demo $(ARGS)

# the tests run in one process per CPU (pytest-xdist), each test file in one of them, so
# that a file's shared fixtures are built once; TEST_WORKERS=0 runs them in this process
TEST_WORKERS ?= logical
XDIST := -n $(TEST_WORKERS) --dist loadfile

test: setup
	$(BIN)/python -m pytest $(XDIST) $(ARGS)

test-all: setup
	$(BIN)/python -m pytest $(XDIST) -m "slow or not slow" $(ARGS)

# The CUDA kernels' tests on CPU (Triton's interpreter, compiled for sm_90): they skip
# without Triton, which `make setup` does not install (about 1 GB on disk).
test-kernels: setup
	$(BIN)/pip install $(PIP_QUIET) 'triton>=3.2' 2>&1 | grep -v "is ignored" || true
	$(BIN)/python -m pytest tests/test_knn.py tests/test_kernels.py $(ARGS)

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: setup
	$(BIN)/python benchmarks/bench_dconv.py

clean:
	rm -rf outputs/runs outputs/multiruns .pytest_cache
