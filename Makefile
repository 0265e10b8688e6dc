# Two commands set everything up on a fresh machine:
#   make build   patched PyTorch wheel for the catalog's default line and this host's Python,
#                then its torchvision built against it (TORCH_ONLY=1: torch alone)
#   make test    the project's own test suite (hermetic: no network beyond 127.0.0.1)
# Each bootstraps the virtual environment it needs: make build only the orchestrator's pinned,
# hashed packages (patches/toolchain/orchestrator.txt); make test adds the test extras, also
# pinned with hashes (patches/toolchain/test.txt).

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
# OpenMP to build with and bundle (--libomp) instead of the pinned llvm-openmp (LLVM libomp, cmeel-libomp wheel) the build fetches.
LIBOMP  ?=
BUILD_ARGS ?=

# The torch that the tests, the regression suite and the benchmark run on, as pip arguments,
# chosen per host by build_scripts/maint/test_torch.py (`make -s test-torch` prints them):
# on an Intel Mac the newest wheel `make build` left in wheels/ (else upstream's torch 2.2.2,
# which is not our build); on Apple silicon the default index's torch; on Linux the CPU-only
# build. TEST_TORCH overrides every rule, e.g. TEST_TORCH=wheels/torch-...whl or
# TEST_TORCH='--extra-index-url https://<owner>.github.io/<repo>/simple torch==2.14.1+intelmac'
# (always the exact +intelmac pin). HOST_OS and HOST_ARCH (Darwin/Linux, x86_64/arm64)
# override the host detection, so that each rule can be checked anywhere.
TEST_TORCH ?=
HOST_OS    ?=
HOST_ARCH  ?=
export TEST_TORCH HOST_OS HOST_ARCH
WHEELS_DIR ?= wheels
TEST_TORCH_ARGS = $(PY) -m intelmac_torch_builder.maint.test_torch --wheels-dir $(WHEELS_DIR)
# One stamp per choice: another TEST_TORCH, host or set of wheels in wheels/ reinstalls torch.
TORCH_STAMP := $(VENV)/.stamp-torch-$(shell printf '%s' '$(TEST_TORCH)|$(HOST_OS)|$(HOST_ARCH)|$(wildcard $(WHEELS_DIR)/*.whl)' | cksum | cut -d' ' -f1)
DEVICE ?=
REPORTS ?= reports
SRC ?=
TAG ?=
EVENT ?=

.PHONY: help build test test-quick test-torch upstream-material rehearse regress bench check-upstream ci-plan ci-simulate lint clean

help:
	@echo "make build [VERSION=2.15.0] [PYTHON='3.11 3.12'] [SOURCE=url|git|path] [SHA256=...] [LIBOMP=prefix] [TORCH_ONLY=1]"
	@echo "                             torch, then its torchvision (TORCH_ONLY=1: torch alone)"
	@echo "make test                    run the project's tests, on every core"
	@echo "make test-quick              the orchestrator, the series and the policy, before a commit"
	@echo "make -s test-torch           the pip arguments of the torch make test installs here"
	@echo "make upstream-material       fetch the real upstream files the skipped tests need"
	@echo "make rehearse [VERSION=...]  repair, verify, index and install on each line's official wheels"
	@echo "make regress DEVICE=mps      GPU regression suite (reports in $(REPORTS)/)"
	@echo "make bench DEVICE=mps        CPU-vs-GPU benchmark (reports in $(REPORTS)/)"
	@echo "make check-upstream SRC=...  apply the series to a real upstream tree or unpacked wheel"
	@echo "make ci-plan [TAG=v2.15.0-1] [EVENT=schedule|workflow_dispatch|push]"
	@echo "                             the release workflow's job graph and commands"
	@echo "make ci-simulate             the release workflow through the ways a release fails"

# setuptools' artefacts of the editable install (the egg-info it writes beside pyproject.toml)
# go to .cache/setuptools, which .gitignore ignores and make clean removes, so that the
# install steps leave the checkout as it was. DIST_EXTRA_CONFIG is setuptools' extra config
# file; setup.cfg cannot say it: egg_base must exist, and a fresh clone has no .cache.
EDITABLE_CFG := .cache/setuptools/make.cfg
EDITABLE = mkdir -p $(dir $(EDITABLE_CFG)) && \
  printf '[egg_info]\negg_base = $(dir $(EDITABLE_CFG))\n' > $(EDITABLE_CFG) && \
  export DIST_EXTRA_CONFIG=$(CURDIR)/$(EDITABLE_CFG) &&

# What `make build` installs, and nothing else: the orchestrator's packages pinned with hashes
# (patches/toolchain/orchestrator.txt, for every platform and Python; delocate on a Mac), then
# the project itself without dependencies or build isolation, so nothing unpinned is fetched.
# The test extras come on top of it, for make test and the development tools.
ORCHESTRATOR_PINS := patches/toolchain/orchestrator.txt

$(VENV)/.stamp-build: pyproject.toml $(ORCHESTRATOR_PINS)
	$(HOST_PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --require-hashes --only-binary=:all: --no-deps -r $(ORCHESTRATOR_PINS)
	$(EDITABLE) $(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

# The orchestrator byte-compiled again whenever one of its files changed, so that each run
# starts from .pyc files even where PYTHONDONTWRITEBYTECODE is set: Python would otherwise
# compile every module at every start, a third of a no-op make build's time.
ORCHESTRATOR_SOURCES := $(wildcard build_scripts/*.py build_scripts/*/*.py build_scripts/*/*/*.py ci/*.py)
$(VENV)/.stamp-pyc: $(VENV)/.stamp-build $(ORCHESTRATOR_SOURCES)
	$(PY) -m compileall -q build_scripts ci
	touch $@

# delocate (pinned for a Mac above) also elsewhere, from the same pins and hashes: make rehearse
# and its test run it on Linux with LLVM's Mach-O tools (build_scripts/maint/mac_tools.py).
$(VENV)/.stamp-delocate: $(VENV)/.stamp-build
	$(PY) -m intelmac_torch_builder.maint.mac_tools delocate-pins > $(VENV)/delocate-pins.txt
	$(PY) -m pip install -q --require-hashes --only-binary=:all: --no-deps -r $(VENV)/delocate-pins.txt
	touch $@

# The test tools the same way: pyproject.toml's test and regress extras, pinned with hashes
# for every platform and Python (patches/toolchain/test.txt, at orchestrator.txt's versions
# where they share a package); the project is already installed without dependencies.
TEST_PINS := patches/toolchain/test.txt

$(VENV)/.stamp: $(VENV)/.stamp-build $(VENV)/.stamp-delocate $(TEST_PINS)
	$(PY) -m pip install -q --require-hashes --only-binary=:all: --no-deps -r $(TEST_PINS)
	touch $@

$(TORCH_STAMP): $(VENV)/.stamp
	@args=$$($(TEST_TORCH_ARGS)) || exit 2; \
	  echo "$(PY) -m pip install -q $$args -e '.[regress]'"; \
	  $(EDITABLE) eval "$(PY) -m pip install -q $$args -e '.[regress]'"
	rm -f $(VENV)/.stamp-torch-*
	touch $@

# The pip arguments of the torch that `make test` installs here (make -s test-torch).
test-torch: $(VENV)/.stamp
	@$(TEST_TORCH_ARGS)

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
build: $(VENV)/.stamp-pyc
	$(info $(PY) -m intelmac_torch_builder all $(BUILD_FLAGS))
	@$(PY) -m intelmac_torch_builder all $(BUILD_FLAGS); code=$$?; \
	if [ $$code -eq 3 ]; then \
	  echo "make build: patched and stopped before compiling; finish on a Mac (exit 0, outcome needs-mac)" >&2; \
	  exit 0; \
	fi; \
	exit $$code

# make test runs every test on every core (pytest-xdist; TEST_WORKERS=0 runs them in one
# process) and lists the 25 slowest at the end. A module's tests stay on one worker
# (--dist loadscope), so its fixtures are built once; what several modules need is built once
# per run for all workers (tests/shared_run.py). PYTEST_ARGS adds pytest options.
TEST_WORKERS ?= auto
PYTEST_ARGS ?=
PYTEST = $(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope $(PYTEST_ARGS)

test: $(TORCH_STAMP)
	$(PYTEST) --durations=25

# The inner loop, before each commit (a few minutes; make test stays the whole suite that CI
# runs): the orchestrator's stages and CLI, the catalog and the patch series as parsed
# files, and the C++ device policy. Not the slow-marked end-to-end builds and installs, nor
# the rehearsal on the official wheels (make rehearse).
QUICK_TESTS = tests/orchestrator tests/core/test_catalog.py tests/core/test_patching.py \
  tests/core/test_cli.py tests/patches_cpp/test_series.py tests/patches_cpp/test_policy.py \
  tests/patches_cpp/test_device_state.py tests/patches_cpp/test_storage_policy.py

test-quick: $(VENV)/.stamp
	$(PYTEST) -m 'not slow' --ignore-glob='tests/orchestrator/test_orch_rehearse*' --durations=10 $(QUICK_TESTS)

regress: $(TORCH_STAMP)
	$(PY) -m tests.regress $(if $(DEVICE),--device $(DEVICE)) --out $(REPORTS)/regress $(REGRESS_ARGS)

bench: $(TORCH_STAMP)
	$(PY) -m tests.bench $(if $(DEVICE),--device $(DEVICE)) --out $(REPORTS)/bench $(BENCH_ARGS)

# The real upstream material some tests check the series against (without it they skip and
# say so): each line's official wheel, the 2.6.0 source tree and its torchvision archive, in
# ~/.cache/pytorch-upstream; and the official wheels the rehearsal's test runs on. Needs the network (the package index and GitHub) and over 2 GB.
upstream-material: $(VENV)/.stamp
	$(PY) -m intelmac_torch_builder.maint.upstream_material
	$(PY) -m intelmac_torch_builder rehearse --fetch-only

# The dress rehearsal: every stage after the compile (repair, verify, index, pip resolving the
# install command) on each line's official upstream wheels, shaped as our build leaves them
# (docs/building.md says what it proves). Fetches them once into ~/.cache/pytorch-upstream.
rehearse: $(VENV)/.stamp
	$(PY) -m intelmac_torch_builder rehearse $(if $(VERSION),--torch $(VERSION))

check-upstream: $(VENV)/.stamp
	@test -n "$(SRC)" || { echo "usage: make check-upstream SRC=<source tree or unpacked wheel> [VERSION=x.y.z]"; exit 2; }
	$(PY) -m intelmac_torch_builder check-upstream $(SRC) $(if $(VERSION),--torch $(VERSION))

ci-plan: $(VENV)/.stamp
	$(PY) -m intelmac_torch_builder ci-plan $(if $(TAG),--tag $(TAG)) $(if $(EVENT),--event $(EVENT))

# The release workflow's job graph (as ci-plan derives it) through the ways a release fails,
# with GitHub's documented semantics; each scenario must end as docs/releasing.md says.
ci-simulate: $(VENV)/.stamp
	$(PY) -m intelmac_torch_builder.ci.simulate

clean:
	rm -rf $(VENV) build .cache $(REPORTS) .pytest_cache .mypy_cache .ruff_cache
