# fedpath: the two commands a newcomer needs.
#   make demo   install, then train three image methods on the synthetic hospitals (about 5 min on 2 cores)
#   make test   install, then lint (ruff), type-check (mypy), the unit tests and the docs build
# CPU-only PyTorch from its own index: make install TORCH_INDEX=https://download.pytorch.org/whl/cpu
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.fedpath-installed
TORCH_INDEX ?=
# a pip constraints file pinning every package (benchmarks/constraints.txt: the set
# the published units were measured with); empty: the newest that fit
CONSTRAINTS ?=

.PHONY: install demo test lint typecheck unit browser docs bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first, by exact version: pip takes the wheels already on this machine
	$(BIN)/pip install --quiet $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "torch==2.14.1" "torchvision==0.29.1"
	$(BIN)/pip install --quiet $(if $(CONSTRAINTS),-c $(CONSTRAINTS)) -e ".[dev]"
	touch $(STAMP)

demo: install
	$(BIN)/fedpath demo

lint: install
	$(BIN)/ruff check fedpath tests benchmarks
	$(BIN)/ruff format --check fedpath tests benchmarks

typecheck: install
	$(BIN)/mypy

# the report's browser test needs Chromium: Debian's, installed where missing and
# possible (the test skips, saying so, where it is not)
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || \
	  (apt-get update -q >/dev/null 2>&1 && \
	   apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1) || \
	  echo "chromium could not be installed: the report's browser test will skip"

unit: install browser
	$(BIN)/pytest

docs: install
	$(BIN)/mkdocs build --strict --quiet --site-dir build/site

test: lint typecheck unit

bench: install
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache build site *.egg-info
