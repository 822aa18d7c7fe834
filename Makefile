# The two commands a newcomer needs: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# The CPU build of PyTorch for daskshuffle.torch; this exact version lies on the CI machine's disk (about 45 s).
	$(BIN)/python -m pip install --quiet torch==2.13.0
	touch $(STAMP)

## Set up, generate a ~200 MB Zarr store, shuffle it on a LocalCluster, report.
demo: $(STAMP)
	$(BIN)/python -m daskshuffle.demo

## Run the test suite.
test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check daskshuffle tests benchmarks
	$(BIN)/ruff format --check daskshuffle tests benchmarks
	$(BIN)/mypy daskshuffle

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis demo-data
