# Two commands on a fresh machine: `make demo` and `make test`. Both set everything up first.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.feedline-installed

# `make test-lerobot`: feedline next to LeRobot 0.6.1, which needs Python 3.12 (PYTHON312=... to choose).
PYTHON312    ?=
LEROBOT_VENV := .venv-lerobot
LEROBOT_BIN  := $(LEROBOT_VENV)/bin
LEROBOT_STAMP := $(LEROBOT_VENV)/.feedline-installed

# The datatrove oracle (tests/text/test_datatrove.py, bench/text.py): datatrove 0.10.1 in a side venv,
# since its pins (huggingface_hub, fsspec) are not feedline's; torch because its dataset classes need it.
DATATROVE_VENV  := .venv-datatrove
DATATROVE_STAMP := $(DATATROVE_VENV)/.feedline-installed

# pip keeps no copy of what it downloads: the LeRobot venv alone pulls several GB of wheels (a CUDA
# build of torch), and a cache of them next to the venvs has filled small CI disks.
export PIP_NO_CACHE_DIR := 1

.PHONY: demo test test-fast test-lerobot lint bench servers ffmpeg venv venv-lerobot venv-datatrove clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "make: $(PYTHON) not found; set PYTHON=/path/to/python3.11"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q 'torch==2.13.0'
	$(BIN)/python -m pip install -q -e '.[dev,test-cloud]'
	@touch $(STAMP)

venv-lerobot: $(LEROBOT_STAMP)

venv-datatrove: $(DATATROVE_STAMP)

$(DATATROVE_STAMP): Makefile
	@test -x $(DATATROVE_VENV)/bin/python || $(PYTHON) -m venv $(DATATROVE_VENV)
	$(DATATROVE_VENV)/bin/python -m pip install -q --upgrade pip
	$(DATATROVE_VENV)/bin/python -m pip install -q 'torch==2.13.0'
	$(DATATROVE_VENV)/bin/python -m pip install -q 'datatrove==0.10.1' 'tokenizers>=0.20' orjson zstandard
	@touch $@

# The first Python 3.12 of: PYTHON312, python3.12 on PATH, pyenv's 3.12 versions. LeRobot goes in first
# so its pins (datasets: fsspec<=...) decide fsspec; s3fs is then asked for the same release (the two
# are released in lockstep), which spares pip's resolver a long backtrack through s3fs/aiobotocore.
$(LEROBOT_STAMP): pyproject.toml
	@py=""; for c in $(PYTHON312) python3.12 \
	    $$(command -v pyenv >/dev/null 2>&1 && for v in $$(pyenv versions --bare 2>/dev/null | grep '^3\.12' | sort -rV); do echo "$$(pyenv root)/versions/$$v/bin/python"; done); do \
	  if "$$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' >/dev/null 2>&1; then py="$$c"; break; fi; done; \
	  test -n "$$py" || { echo "make: no Python 3.12 found (LeRobot 0.6.1 needs it): put python3.12 on PATH or set PYTHON312=/path/to/python3.12"; exit 1; }; \
	  test -x $(LEROBOT_BIN)/python || { echo "creating $(LEROBOT_VENV) with $$py"; "$$py" -m venv $(LEROBOT_VENV); }
	$(LEROBOT_BIN)/python -m pip install -q --upgrade pip
	$(LEROBOT_BIN)/python -m pip install -q "$$(sed -n 's/^ *"\(lerobot\[[^"]*\)".*/\1/p' pyproject.toml)"
	$(LEROBOT_BIN)/python -m pip install -q -e '.[lerobot,dev]' "s3fs==$$($(LEROBOT_BIN)/python -c 'import fsspec; print(fsspec.__version__)')"
	@touch $(LEROBOT_STAMP)

# torchcodec (LeRobot's video decoder) loads the system FFmpeg libraries; CI runs as root.
ffmpeg: $(LEROBOT_STAMP)
	@$(LEROBOT_BIN)/python -c 'import torchcodec.decoders' >/dev/null 2>&1 || { \
	  echo "installing ffmpeg for torchcodec (apt-get)"; \
	  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q ffmpeg >/dev/null; }

# Azurite (Microsoft's Azure Storage server, from npm) for the az:// tests, in .azurite/ next to the venv.
AZURITE_VERSION := 3.37.0
AZURITE := .azurite/node_modules/.bin/azurite-blob

$(AZURITE):
	@command -v npm >/dev/null 2>&1 || { \
	  echo "installing npm for azurite (apt-get)"; \
	  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q npm >/dev/null; }
	mkdir -p .azurite && npm install --silent --no-audit --no-fund --prefix .azurite 'azurite@$(AZURITE_VERSION)'

# System servers and programs the tests need (nginx, headless chromium, Azurite; moto and
# gcp-storage-emulator run from the venv). CI runs as root.
servers: $(AZURITE)
	@command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx || { \
	  echo "installing nginx (apt-get)"; \
	  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx-light >/dev/null \
	  || DEBIAN_FRONTEND=noninteractive apt-get install -y -q nginx >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium (apt-get; the run report's screenshot test)"; \
	  apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null; }

demo: $(STAMP)
	$(BIN)/feedline demo

test: $(STAMP) servers $(DATATROVE_STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

# Everything that needs no server (no nginx install, no moto, no emulators): the quick loop while editing.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not server"

# tests/lerobot/ (skipped by `make test`): feedline train and the LeRobot oracle, under Python 3.12.
test-lerobot: $(LEROBOT_STAMP) servers ffmpeg
	$(LEROBOT_BIN)/python -m pytest -q -p no:cacheprovider tests/lerobot

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

bench: $(STAMP) servers $(DATATROVE_STAMP)
	$(BIN)/python -m pip install -q -e '.[bench]'
	@for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) $(LEROBOT_VENV) $(DATATROVE_VENV) .azurite build src/*.egg-info .pytest_cache .hypothesis
