# dlrm-multiepoch: install, demo, tests, benchmarks.
#
#   make demo          pre-train tables, then compare the default strategies (2 ranks each, under TorchX): table, CSV, PNG, TensorBoard
#   make test          the test suite in PYTEST_WORKERS=2 processes (0: one); PYTEST_ARGS="tests/test_components.py -x" picks tests
#   make test-fast     the tests that spawn no processes and download nothing (markers: multiprocess, launch, network), under a minute
#   make test-1.9      the tests that reach into TorchRec's internals, on the TorchRec 1.9 stack (.venv-1.9/)
#   make test-wheel    build the wheel, install it (no -e) into fresh TorchRec 1.8 and 1.9 venvs, run the README's tour from outside the
#                      checkout, and in the 1.9 venv test-1.9's tests (CI's run of them: one 1.9 stack installed, not two)
#   make test-image    build the Dockerfile's default (CPU) image with buildah, run the app in it (needs root, not .venv/)
#   make test-cluster  start a Slurm cluster on this machine, run tests/cluster on it, stop it (needs root)
#   make bench         the speed benchmarks (benchmarks/bench_*.py) at quick sizes, then a line each: its ratio, wall time
#   make install       only create .venv/ and install into it (the targets above do it first)
#   make stack         print the stack's pip arguments, one install step a line (with TORCHREC=, DEVICE=)
#
# Each target but test-image creates .venv/ on first use and installs the stack into it; a stamp file
# makes later calls skip the install until pyproject.toml or this Makefile changes.
#
#   TORCHREC=1.8          (default) torchrec 1.8.0 with torch 2.13.0 and fbgemm 1.8.0, in .venv/
#   TORCHREC=1.9          torchrec 1.9.2 with torch 2.14.1 and fbgemm 1.9.0, in .venv-1.9/
#   DEVICE=cpu            (default) CPU builds: fbgemm-gpu-cpu
#   DEVICE=cuda           CUDA builds: fbgemm-gpu and PyPI's CUDA torch
#   TORCH_INDEX_URL=URL   extra index for torch (and fbgemm-gpu), e.g. the PyTorch index
#                         .../whl/cpu for a small CPU torch, .../whl/cu128 for CUDA 12.8
#   PYTHON=python3.11     the interpreter that creates .venv/
# Switching DEVICE rebuilds .venv/ from scratch: the two builds of torch and fbgemm
# share version numbers, so pip would keep the installed ones.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
TORCHREC ?= 1.8
DEVICE ?= cpu
TORCH_INDEX_URL ?=
PYTEST_ARGS ?=
# pytest-xdist workers for `make test`, each taking whole files (their module fixtures build once). Most
# multi-process tests spawn 2 ranks, yet on 2 cores 2 workers cut the suite's wall time by a fifth (the
# launches wait on imports and I/O); test-fast gains nothing from them and stays one process.
PYTEST_WORKERS ?= 2
DEMO_ARGS ?=

# One stack per TorchRec release: the torch it is built against and the FBGEMM of the
# same release (FBGEMM's binaries miss symbols of any other torch). Each stack gets its own
# venv, so trying the other release never clobbers .venv/.
ifeq ($(TORCHREC),1.8)
TORCH_VERSION := 2.13.0
FBGEMM_VERSION := 1.8.0
TORCHREC_VERSION := 1.8.0
VENV := .venv
else ifeq ($(TORCHREC),1.9)
TORCH_VERSION := 2.14.1
FBGEMM_VERSION := 1.9.0
TORCHREC_VERSION := 1.9.2
VENV := .venv-1.9
else
$(error TORCHREC must be 1.8 or 1.9, not '$(TORCHREC)')
endif
# Datasets and pre-trained tables of the repository's targets stay in the checkout (outside
# one, the package caches under ~/.cache/dlrm_multiepoch); an exported value wins.
export DLRM_MULTIEPOCH_CACHE ?= $(CURDIR)/.cache/dlrm_multiepoch
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
STAMP := $(VENV)/.installed-$(DEVICE)
# Jobs launched by `torchx run -s local_cwd` find torchrun on PATH.
RUN := PATH="$(abspath $(VENV)/bin):$$PATH"

TORCH := torch==$(TORCH_VERSION)
# torchrec's own dependencies at its pins (the same for both releases).
TORCHREC_DEPS := tensordict==0.15.3 torchmetrics==1.0.3 pyre-extensions==0.0.32 iopath==0.1.10
ifeq ($(DEVICE),cpu)
FBGEMM := fbgemm-gpu-cpu==$(FBGEMM_VERSION)
else ifeq ($(DEVICE),cuda)
FBGEMM := fbgemm-gpu==$(FBGEMM_VERSION)
else
$(error DEVICE must be cpu or cuda, not '$(DEVICE)')
endif
# A local version (2.13.0+cpu, +cu128) sorts above PyPI's plain 2.13.0, so with an extra
# index pip takes that index's build of the exact pin.
TORCH_INDEX := $(if $(TORCH_INDEX_URL),--extra-index-url $(TORCH_INDEX_URL))

.PHONY: help install stack demo test test-fast test-1.9 test-wheel test-image test-cluster bench

help:
	@sed -n '3,/^$$/s/^# \{0,1\}//p' Makefile

install: $(STAMP)

# The stack's pip arguments, one install step a line, in order (our package goes into the second
# step). The Dockerfile and docs/INSTALL.md install exactly these (tests/test_install.py).
stack:
	@echo '$(TORCH) $(FBGEMM)'
	@echo '$(TORCH) $(FBGEMM) $(TORCHREC_DEPS)'
	@echo '--no-deps torchrec==$(TORCHREC_VERSION)'

$(STAMP): pyproject.toml Makefile
	@# .device records what the venv was made for, even if an install stopped halfway.
	@if [ -e '$(VENV)/.device' ] && [ "$$(cat '$(VENV)/.device')" != '$(DEVICE)' ]; then \
		echo "DEVICE changed to $(DEVICE): recreating $(VENV)/"; rm -rf '$(VENV)'; fi
	[ -x '$(PY)' ] || '$(PYTHON)' -m venv '$(VENV)'
	echo '$(DEVICE)' > '$(VENV)/.device'
	@# torch first, by its exact pin (a range or a bare "torch" pulls a multi-GB CUDA build).
	$(PIP) $(TORCH_INDEX) '$(TORCH)' '$(FBGEMM)'
	@# torchrec's dependencies at its pins, and ours; repeating the torch and fbgemm pins
	@# stops any of them from swapping the builds.
	$(PIP) '$(TORCH)' '$(FBGEMM)' $(TORCHREC_DEPS) -e '.[test,kubernetes]'
	@# torchrec requires an unpinned fbgemm-gpu, which would replace fbgemm-gpu-cpu by the
	@# CUDA build: install it last and alone.
	$(PIP) --no-deps torchrec==$(TORCHREC_VERSION)
	$(PY) -c 'import torch, fbgemm_gpu, torchrec, torchx, dlrm_multiepoch; \
		print(f"installed torch {torch.__version__} (CUDA {torch.version.cuda}), torchrec {torchrec.__version__}")'
	rm -f $(VENV)/.installed-*
	touch '$@'

# The demo pre-trains the embedding tables on Book-Crossing's implicit interactions
# (once: the checkpoint is cached), then runs the default strategy comparison on the
# multi-path model from those tables (`dlrm-multiepoch sweep`: joint-1ep, joint, early,
# delayed and the remedies registered as defaults; 1 seed; each run on 2 local ranks
# under TorchX), then prints the table and the paths of the CSV, the PNG and the
# TensorBoard logs (`dlrm-multiepoch compare`).
DEMO_STAMP := $(shell date +%Y%m%d-%H%M%S)
DEMO_DIR ?= runs/demo-$(DEMO_STAMP)
DEMO_EPOCHS ?= 2
DEMO_STRATEGIES ?=
DEMO_MODEL_ARGS := --history_length 10
# The data flags decide the id maps, hence the tables' rows: pre-training and every run of
# the sweep get the same ones (the sweep's auto strategies need a validation split).
DEMO_DATA_ARGS := --val_fraction 0.1
DEMO_PRETRAINED ?= .cache/dlrm_multiepoch/pretrained/bookcrossing-multipath-d16-h10-val0.1
CLI := $(RUN) $(VENV)/bin/dlrm-multiepoch

$(DEMO_PRETRAINED)/pretrain.json: | $(STAMP)
	@mkdir -p '$(dir $(DEMO_PRETRAINED))'
	@echo "pre-training the tables on Book-Crossing's implicit ratings (once; 2 ranks under TorchX; log: $(DEMO_PRETRAINED).log)"
	@$(RUN) $(VENV)/bin/torchx run -s local_cwd dlrm_multiepoch.train -j 1x2 -m dlrm_multiepoch.pretrain $(DEMO_MODEL_ARGS) \
		-- $(DEMO_DATA_ARGS) --pretrain_output $(DEMO_PRETRAINED) --no-progress_bar > '$(DEMO_PRETRAINED).log' 2>&1 \
		|| { tail -n 40 '$(DEMO_PRETRAINED).log'; exit 1; }

demo: $(STAMP) $(DEMO_PRETRAINED)/pretrain.json
	@$(CLI) sweep $(DEMO_DIR) $(DEMO_STRATEGIES) --epochs $(DEMO_EPOCHS) -j 1x2 $(DEMO_ARGS) \
		-- --model multipath $(DEMO_MODEL_ARGS) $(DEMO_DATA_ARGS) --pretrained_tables $(DEMO_PRETRAINED) --no-progress_bar
	@$(CLI) compare $(DEMO_DIR)

test: $(STAMP)
	$(RUN) $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# Markers in pyproject.toml; tests/conftest.py marks the tests that spawn ranks or start programs.
# The bad-input fuzz suites draw 10 seeded examples each here, 40 in `make test`.
test-fast: $(STAMP)
	DLRM_BAD_INPUT_EXAMPLES=10 $(RUN) $(PY) -m pytest -m "not multiprocess and not launch and not network" $(PYTEST_ARGS)

# The tests that follow TorchRec's private internals (the drop-in wrappers, the semi-sync
# pipeline, freezing, gates, fused lookups and their optimizer state, resharded
# checkpoints) and the install checks, on the other TorchRec release than the default:
# CI runs the whole suite on 1.8 (`make test`) and these on 1.9 (in `make test-wheel`'s 1.9 venv).
TORCHREC_INTERNALS_TESTS := tests/test_install.py tests/test_dropin.py tests/test_pipeline_semi_sync.py \
	tests/test_freeze.py tests/test_freeze_multipath.py tests/test_gates.py tests/test_lookup_fused.py \
	tests/test_lookup_small_table.py tests/test_lookup_singleton.py tests/test_optim_falr.py tests/test_checkpoint.py tests/test_checkpoint_folders.py \
	tests/test_example_deepfm.py tests/test_own_loop_checks.py
test-1.9:
	$(MAKE) test TORCHREC=1.9 PYTEST_ARGS='$(TORCHREC_INTERNALS_TESTS) $(PYTEST_ARGS)'

# The package as a user gets it: a wheel, installed without -e by docs/INSTALL.md's lines into a
# fresh venv per TorchRec release (CPU), its site-packages made read-only, and from a folder outside
# the checkout the README's quick tour and the TorchX components (tools/wheel/run.sh;
# tests/wheel/). WHEEL_RELEASES picks the stacks; on those in WHEEL_INTERNALS the venv also runs
# test-1.9's list from the checkout (so CI installs the 1.9 stack once; `make test-1.9` stays for
# a developer's own .venv-1.9/).
WHEEL_RELEASES ?= 1.8 1.9
WHEEL_INTERNALS ?= 1.9
test-wheel: $(STAMP)
	INTERNALS_RELEASES='$(WHEEL_INTERNALS)' INTERNALS_TESTS='$(TORCHREC_INTERNALS_TESTS)' tools/wheel/run.sh '$(PY)' $(WHEEL_RELEASES)

# The Dockerfile's CPU image built with buildah as root (a debootstrap base; no Docker engine or
# registry needed), then `python -m dlrm_multiepoch.train --help` and a tiny 1-rank training in it,
# its data written in the image too: no .venv/ install first.
test-image:
	@[ "$$(id -u)" = 0 ] || { echo "make test-image: needs root (buildah with --isolation chroot); nothing was run" >&2; exit 1; }
	tools/image/run.sh

# A real Slurm on this machine (tools/slurm/start.sh: munged, MariaDB, slurmdbd,
# slurmctld, two slurmd), tests/cluster run on it, and every daemon it started stopped
# again, whether the tests pass, fail or are interrupted. Needs root and Debian's
# slurm-wlm munge slurmdbd mariadb-server (start.sh installs them with apt-get if missing).
SLURM_STATE ?= /tmp/dlrm-multiepoch-slurm
test-cluster: $(STAMP)
	@[ "$$(id -u)" = 0 ] || { echo "make test-cluster: needs root (it starts Slurm, munge and MariaDB daemons); nothing was run" >&2; exit 1; }
	@trap 'tools/slurm/stop.sh "$(SLURM_STATE)"' EXIT; trap 'exit 130' INT TERM HUP; \
	tools/slurm/start.sh "$(SLURM_STATE)"; \
	SLURM_CONF="$(SLURM_STATE)/slurm.conf" $(RUN) $(PY) -m pytest tests/cluster $(PYTEST_ARGS)

# The quality runs (benchmarks/quality/: seeds of real training) and the analyses of run
# folders (benchmarks/analysis/: they take the folders as arguments) are not part of it.
bench: $(STAMP)
	@$(RUN) $(PY) benchmarks/tools/run_all.py
