# fedpath: the two commands a newcomer needs.
#   make demo   install, then train four image methods on the synthetic hospitals (about 7.5 min on 2 cores)
#   make test   install, then lint (ruff), type-check (mypy), the unit tests and the docs build
# CPU-only PyTorch from its own index: make install TORCH_INDEX=https://download.pytorch.org/whl/cpu
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.fedpath-installed
TORCH_INDEX ?=

.PHONY: install demo test lint typecheck unit docs bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, by exact version: pip takes the wheels already on this machine
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "torch==2.14.1" "torchvision==0.29.1"
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

demo: install
	$(BIN)/fedpath demo

lint: install
	$(BIN)/ruff check fedpath tests benchmarks
	$(BIN)/ruff format --check fedpath tests benchmarks

typecheck: install
	$(BIN)/mypy

unit: install
	$(BIN)/pytest

docs: install
	$(BIN)/mkdocs build --strict --quiet --site-dir build/site

test: lint typecheck unit

bench: install
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache build site *.egg-info
