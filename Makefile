# The two commands the README opens with: `make up` (the whole stack, embedded) and `make test`.
# Both bootstrap a virtual environment in .venv on first use.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of torch, installed before the `gpu` extra (torch, PyAV, numpy: the GPU
# worker's) so that pip keeps it; a machine with CUDA can install a CUDA build instead.
TORCH ?= torch==2.13.0

.PHONY: up test lint typecheck unit bench install system-deps

$(BIN)/.installed: pyproject.toml
	@command -v git >/dev/null && command -v bwrap >/dev/null && command -v slirp4netns >/dev/null \
		&& command -v nft >/dev/null && command -v runsc >/dev/null && command -v npm >/dev/null && test -x /usr/bin/python3 \
		&& command -v haproxy >/dev/null \
		&& ldconfig -p | grep -q libseccomp.so.2 || $(MAKE) --no-print-directory system-deps
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e '.[dev,gpu]'
	@touch $@

install: $(BIN)/.installed

# git, and the CI sandbox: bubblewrap, libseccomp (its syscall filter), slirp4netns and
# nftables (filtered network for jobs whose plan allows it), python3 (the job-side helper runs
# the system's), runsc (the gVisor backend; Debian's build fails its self-test, see Security); chromium for the console's browser
# tests (Playwright drives it; no browser download); npm (tests fetch GitHub's REST description,
# @octokit/openapi, from the registry; skipped where a Node install already brings npm, as
# NodeSource's nodejs does, which conflicts with Debian's npm); podman, runc, mmdebstrap,
# docker-registry, skopeo and iptables for the OCI backend (container: and services:) and the
# images its tests build offline; haproxy for the many-host test's load balancer; needs root
# or sudo.
system-deps:
	@SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	PKGS="git bubblewrap libseccomp2 slirp4netns nftables python3 runsc chromium podman runc mmdebstrap docker-registry skopeo iptables haproxy"; \
	command -v npm >/dev/null || PKGS="$$PKGS npm"; \
	$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$PKGS >/dev/null

# Ports and flags pass through: `make up API_PORT=8080` (else $LEASEHOLD_API_PORT, else 8000),
# TEMPORAL_PORT, UI_PORT, and UP_ARGS for the rest (`UP_ARGS='--no-ui --data-dir /srv/lh'`).
UP_FLAGS = $(if $(API_PORT),--api-port $(API_PORT)) $(if $(TEMPORAL_PORT),--temporal-port $(TEMPORAL_PORT)) \
	$(if $(UI_PORT),--ui-port $(UI_PORT)) $(UP_ARGS)
up: $(BIN)/.installed
	$(BIN)/leasehold up $(strip $(UP_FLAGS))

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(BIN)/.installed
	$(BIN)/mypy

# Packages run in parallel, each whole on one worker (tests/conftest.py); TEST_WORKERS=0 runs
# them in this one process, in order.
# Tests marked `alone` (the many-host chaos test) run afterwards on their own; exit code 5 is
# pytest's "none selected", when PYTEST_ARGS picks none of them.
TEST_WORKERS ?= 3
test: lint typecheck
	$(BIN)/python -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadgroup -m "not alone" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m alone $(PYTEST_ARGS) || [ $$? -eq 5 ]

bench: $(BIN)/.installed
	$(BIN)/python -m bench $(BENCH_ARGS)

.PHONY: chaos
# The chaos suite alone (it also runs in `make test`); LEASEHOLD_CHAOS_SEED=<n> replays a run.
chaos: $(BIN)/.installed
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/chaos $(PYTEST_ARGS)
