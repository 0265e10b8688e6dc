# Two commands set everything up on a fresh machine:
#   make build   patched PyTorch wheel for the catalog's default line and this host's Python,
#                then its torchvision built against it (TORCH_ONLY=1: torch alone)
#   make test    the project's own test suite (hermetic: no network beyond 127.0.0.1)
# Each bootstraps the virtual environment it needs from pyproject.toml.

HOST_PYTHON ?= python3
VENV        ?= .venv
PY          := $(VENV)/bin/python

# Passed through to `python -m intelmac_torch_builder all` (empty: the catalog's default / the host's Python).
VERSION ?=
PYTHON  ?=
SOURCE  ?=
SHA256  ?=
# Non-empty: build torch alone, without the line's torchvision companion.
TORCH_ONLY ?=
# OpenMP to build with and bundle (--libomp): one built for the line's deployment target.
LIBOMP  ?=
BUILD_ARGS ?=

# The torch that the tests, the regression suite and the benchmark run on: pip arguments, so a
# patched wheel works too, e.g. TEST_TORCH='--extra-index-url https://<owner>.github.io/<repo>/simple
# torch==2.14.1+intelmac' (always the exact +intelmac pin) or TEST_TORCH=wheels/torch-...whl.
# 2.13.0 is a CPU build that pip finds without a large download on the project's machines.
TEST_TORCH ?= torch==2.13.0
# One stamp per TEST_TORCH value: changing it reinstalls torch.
TORCH_STAMP := $(VENV)/.stamp-torch-$(shell printf '%s' '$(TEST_TORCH)' | cksum | cut -d' ' -f1)
DEVICE ?=
REPORTS ?= reports
SRC ?=
TAG ?=

.PHONY: help build test regress bench check-upstream ci-plan lint clean

help:
	@echo "make build [VERSION=2.15.0] [PYTHON='3.11 3.12'] [SOURCE=url|git|path] [SHA256=...] [LIBOMP=prefix] [TORCH_ONLY=1]"
	@echo "                             torch, then its torchvision (TORCH_ONLY=1: torch alone)"
	@echo "make test                    run the project's tests"
	@echo "make regress DEVICE=mps      GPU regression suite (reports in $(REPORTS)/)"
	@echo "make bench DEVICE=mps        CPU-vs-GPU benchmark (reports in $(REPORTS)/)"
	@echo "make check-upstream SRC=...  apply the series to a real upstream tree or unpacked wheel"
	@echo "make ci-plan [TAG=v2.15.0-1] the release workflow's job graph and commands"

$(VENV)/.stamp: pyproject.toml
	$(HOST_PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

$(TORCH_STAMP): $(VENV)/.stamp
	$(PY) -m pip install -q $(TEST_TORCH) -e '.[regress]'
	rm -f $(VENV)/.stamp-torch-*
	touch $@

BUILD_FLAGS = $(strip $(if $(VERSION),--torch $(VERSION)) $(foreach p,$(PYTHON),--python $(p)) \
  $(if $(SOURCE),--source $(SOURCE)) $(if $(SHA256),--sha256 $(SHA256)) \
  $(if $(LIBOMP),--libomp $(LIBOMP)) $(if $(TORCH_ONLY),--torch-only) $(BUILD_ARGS))

# Exit status of `make build` (GNU make itself exits only 0 or 2):
#   0  done: the wheels are built (or were up to date); or, on a host that cannot compile, the
#      source is fetched, checked and patched and the run stopped before compiling (the
#      command's exit 3, "needs a Mac"). build/<version>/outcome.json says which:
#      {"outcome": "built"} or {"outcome": "needs-mac"}.
#   2  an error (the command's exit 1, or 2 for bad arguments); outcome.json says "error"
#      once the arguments were understood.
# Scripts that want the three cases as exit codes run `$(PY) -m intelmac_torch_builder all`:
# 0 built, 1 error, 2 usage error, 3 needs a Mac.
build: $(VENV)/.stamp
	$(info $(PY) -m intelmac_torch_builder all $(BUILD_FLAGS))
	@$(PY) -m intelmac_torch_builder all $(BUILD_FLAGS); code=$$?; \
	if [ $$code -eq 3 ]; then \
	  echo "make build: patched and stopped before compiling; finish on a Mac (exit 0, outcome needs-mac)" >&2; \
	  exit 0; \
	fi; \
	exit $$code

test: $(TORCH_STAMP)
	$(PY) -m pytest

regress: $(TORCH_STAMP)
	$(PY) -m tests.regress $(if $(DEVICE),--device $(DEVICE)) --out $(REPORTS)/regress $(REGRESS_ARGS)

bench: $(TORCH_STAMP)
	$(PY) -m tests.bench $(if $(DEVICE),--device $(DEVICE)) --out $(REPORTS)/bench $(BENCH_ARGS)

check-upstream: $(VENV)/.stamp
	@test -n "$(SRC)" || { echo "usage: make check-upstream SRC=<source tree or unpacked wheel> [VERSION=x.y.z]"; exit 2; }
	$(PY) -m intelmac_torch_builder check-upstream $(SRC) $(if $(VERSION),--torch $(VERSION))

ci-plan: $(VENV)/.stamp
	$(PY) -m intelmac_torch_builder ci-plan $(if $(TAG),--tag $(TAG))

clean:
	rm -rf $(VENV) build .cache $(REPORTS)
