# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_STAMP := $(VENV)/.installed-torch
# The tests of daskshuffle.torch need PyTorch; this exact CPU build lies on the CI machine's disk
# (about 45 s to install). `make test TORCH=` skips it (those tests are then skipped).
TORCH ?= torch==2.13.0

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

$(TORCH_STAMP): $(STAMP)
	$(if $(TORCH),$(BIN)/python -m pip install --quiet '$(TORCH)')
	touch $(TORCH_STAMP)

## Set up, generate a ~200 MB Zarr store, shuffle it on a LocalCluster, report.
demo: $(STAMP)
	$(BIN)/python -m daskshuffle.demo

## Run the test suite.
test: $(TORCH_STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check daskshuffle tests benchmarks
	$(BIN)/ruff format --check daskshuffle tests benchmarks
	$(BIN)/mypy daskshuffle

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis demo-data
