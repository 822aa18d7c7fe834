# The two commands a newcomer needs: `make demo` and `make test` (what CI runs: lint, then every test).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_STAMP := $(VENV)/.installed-torch
# The tests of daskshuffle.torch need PyTorch; this exact CPU build lies on the CI machine's disk
# (about 45 s to install), with torchdata for StatefulDataLoader. `make test TORCH=` skips both (those tests are then skipped).
TORCH ?= torch==2.13.0 torchdata==0.11.0

.PHONY: demo test test-fast lint bench bench-peers clean

LINTED := daskshuffle tests benchmarks conftest.py
# setuptools warns on every editable install that a folder named like the package may take precedence
# during imports (its "Editable installation" banner): that folder is this checkout, by design. Only that
# module's warning is silenced; pip's errors and every other warning still show.
EDITABLE_QUIET := PYTHONWARNINGS=ignore::UserWarning:setuptools.command.editable_wheel
BENCH_DATA := benchmarks/data/quick

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(EDITABLE_QUIET) $(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The peers of benchmarks/bench_peers.py (MosaicML Streaming, litdata, Ray Data) live in a venv of their own, never
# in the project's dependencies. torch==2.13.0 goes first: it is the CPU build on local disk (any other spec
# downloads several GB), and torchvision==0.28.0 is the release made for it (its compiled ops need CUDA
# torch and do not load; streaming imports it only for its vision datasets). mosaicml-streaming 0.13.0 pins
# numpy<2.2, so it goes in with --no-deps, and its runtime dependencies that local files need go in by hand
# on the project's numpy (its cloud clients: boto3 for litdata only; no google-cloud-storage, oci, azure,
# paramiko). Ray Data goes in last, on what is there (its wheel brings the raylet and object store).
PEERS_VENV ?= .venv-peers
PEERS_BIN := $(PEERS_VENV)/bin
PEERS_STAMP := $(PEERS_VENV)/.installed
PEERS_ARGS ?= --size 64MiB

$(PEERS_STAMP): pyproject.toml
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_BIN)/python -m pip install --quiet --upgrade pip
	$(PEERS_BIN)/python -m pip install --quiet torch==2.13.0
	$(EDITABLE_QUIET) $(PEERS_BIN)/python -m pip install --quiet -e . psutil torch==2.13.0 torchvision==0.28.0 litdata==0.2.76
	$(PEERS_BIN)/python -m pip install --quiet --no-deps mosaicml-streaming==0.13.0
	$(PEERS_BIN)/python -m pip install --quiet 'transformers<5' 'xxhash>=3,<4' 'zstd>=1.5.2.5,<2' \
		'python-snappy>=0.6.1,<1' 'Brotli>=1.0.9' 'tqdm>=4.64,<5' 'catalogue>=2,<3' 'matplotlib>=3.5.2,<4'
	$(PEERS_BIN)/python -m pip install --quiet 'ray[data]==2.60.0'
	touch $(PEERS_STAMP)

$(TORCH_STAMP): $(STAMP)
	$(if $(TORCH),$(BIN)/python -m pip install --quiet $(TORCH))
	touch $(TORCH_STAMP)

## Set up, generate a ~200 MB Zarr store, shuffle it on a LocalCluster, report.
demo: $(STAMP)
	$(BIN)/python -m daskshuffle.demo

## Lint, then run every test, doctests included (CI runs this: .ci/run). Two pytest processes, a test file each
## at a time: much of the run waits on deadlines of stalled storage and on clusters starting, and the files share no state.
test: $(TORCH_STAMP) lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --durations=15

## The quick loop while changing code: no slow tests, no LocalCluster, fewer property examples, two processes.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow and not cluster" --hypothesis-profile=fast

## ruff (lint and format), mypy and import-linter (the layers), pinned in pyproject.toml's dev extra.
lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	$(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy daskshuffle
	$(BIN)/lint-imports --no-cache

## A quick round of every benchmark on small data (a few minutes): they still run. The figures worth
## recording come from full-size runs (benchmarks/README.md).
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_shuffle_zarr.py --size 64MiB --n-piles 16 --memory-limit 1GiB --check --data $(BENCH_DATA)
	$(BIN)/python benchmarks/bench_parquet.py --rows 262144 --n-piles 16 --memory-limit 1GiB --timeout 120 --data $(BENCH_DATA)
	$(BIN)/python benchmarks/bench_parquet_pieces.py --rows 100000 --n-piles 64
	$(BIN)/python benchmarks/bench_lines.py --size 20MB
	$(BIN)/python benchmarks/bench_loader.py --size 64MiB --n-piles 8 --repeat 1 --random-seconds 1 --data $(BENCH_DATA)
	$(BIN)/python benchmarks/bench_batching.py --rows 262144 --repeat 1
	$(BIN)/python benchmarks/bench_units.py --size 64MiB --pile-mib 4 16 --repeat 1 --data $(BENCH_DATA)
	$(BIN)/python benchmarks/bench_faults.py --size 32MiB
	$(BIN)/python benchmarks/bench_s3.py --size 16MiB --repeat 1
	$(BIN)/python benchmarks/bench_s3_model.py --size 16MiB --repeat 1
	$(BIN)/python benchmarks/bench_s3_levels.py --size 16MiB --block-memory 1MiB --n-piles 64 --max-levels 2 --repeat 1
	$(BIN)/python benchmarks/bench_s3_outputs.py --lines 100000 --files 20 --repeat 1
	$(BIN)/python benchmarks/bench_epochs.py --size 16MiB --epochs 2 --work-ms 2
	$(BIN)/python benchmarks/bench_append.py --day-size 8MiB --days 3 --rounds 1
	$(BIN)/python benchmarks/bench_levels.py --size 8MiB --repeat 1
	$(BIN)/python benchmarks/bench_quality.py --rows 100000 --memory 1000 --time 1000000
	$(BIN)/python benchmarks/bench_plan.py --plans 1000
	$(BIN)/python benchmarks/bench_checksum.py --nbytes 4000000 --repeat 1 --lines 4
	$(if $(wildcard $(PEERS_BIN)/python),$(PEERS_BIN),$(BIN))/python benchmarks/bench_peers.py --size 64MiB --peer-seconds 5 --data $(BENCH_DATA)

## daskshuffle against MosaicML Streaming, litdata and Ray Data (benchmarks/bench_peers.py) in their own venv.
bench-peers: $(PEERS_STAMP)
	$(PEERS_BIN)/python benchmarks/bench_peers.py $(PEERS_ARGS)

clean:
	rm -rf $(VENV) $(PEERS_VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache demo-data $(BENCH_DATA)
