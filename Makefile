# Two commands on a fresh machine: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.feedline-installed

.PHONY: demo test test-fast lint bench servers venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found; set PYTHON=/path/to/python3.11"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q 'torch==2.13.0'
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# System servers the tests need (nginx; moto runs from the venv). CI runs as root.
servers:
	@command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx || { \
	  echo "installing nginx (apt-get)"; \
	  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null \
	  || DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx >/dev/null; }

demo: $(STAMP)
	$(BIN)/feedline demo

test: $(STAMP) servers
	$(BIN)/python -m pytest -q -p no:cacheprovider

# Everything that needs no server (no nginx install, no moto): the quick loop while editing.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not server"

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

bench: $(STAMP) servers
	$(BIN)/python -m pip install -q -e '.[bench]'
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .hypothesis
