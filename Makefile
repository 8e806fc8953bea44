# nsbridge developer targets. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# CPU build for development and CI; on a CUDA machine: make TORCH_SPEC="torch" install
TORCH_SPEC ?= torch==2.13.0
# nvtx 0.2.10: the newest release whose ranges Debian's nsys 2022.4 records (see shared facts)
NVTX_SPEC  ?= nvtx==0.2.10
STAMP  := $(VENV)/.installed

.PHONY: install demo demo-gate test test-gpu bench clean

# nsbridge's own Make targets (profile-triage, profile-timeline, profile-deep, perf-gate),
# run with this checkout's venv: e.g. make profile-triage SCRIPT=examples/train_cnn.py
NSBRIDGE := $(BIN)/nsbridge
include nsbridge/make/nsbridge.mk
profile-triage profile-timeline profile-deep perf-gate: install
.DEFAULT_GOAL := demo

# setup.py compiles the C extensions: a changed one reinstalls (rebuilds) them
$(STAMP): pyproject.toml setup.py nsbridge/parse/_scan.c nsbridge/model/_nest.c
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)" "$(NVTX_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/nsbridge triage examples/train_cnn.py -- --epochs 1

# the perf gate on the bundled example: a baseline run, and a run with a planted slowdown
# (extra matmuls; NSBRIDGE_* variables are recorded in the run's manifest), measured again
# in interleaved pairs by `nsbridge gate`: it fails and names aten::mm
demo-gate: install
	rm -rf nsbridge-runs/gate-base nsbridge-runs/gate-new
	$(NSBRIDGE) -q triage --threads 1 --out nsbridge-runs/gate-base examples/train_cnn.py -- --steps 30 > /dev/null
	NSBRIDGE_EXAMPLE_SLOW_MATMULS=64 $(NSBRIDGE) -q triage --threads 1 --out nsbridge-runs/gate-new examples/train_cnn.py -- --steps 30 > /dev/null
	-$(MAKE) --no-print-directory perf-gate BASE=nsbridge-runs/gate-base NEW=nsbridge-runs/gate-new PROCESSES=3 GATE_STEPS=20

test: install
	$(BIN)/python -m pytest -q

test-gpu: install
	$(BIN)/python -m pytest -q -m gpu

bench: install
	$(BIN)/python bench/trace_scale.py
	$(BIN)/python bench/nsys_scale.py
	$(BIN)/python bench/ranks_scale.py
	$(BIN)/python bench/triage_overhead.py
	$(BIN)/python bench/nvtx_overhead.py
	$(BIN)/python bench/deep_cost.py
	$(BIN)/python bench/gate_quality.py

clean:
	rm -rf $(VENV) nsbridge-runs .pytest_cache build nsbridge/parse/_scan.*.so nsbridge/model/_nest.*.so
