# nsbridge developer targets. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# CPU build for development and CI; on a CUDA machine: make TORCH_SPEC="torch" install
TORCH_SPEC ?= torch==2.13.0
# nvtx 0.2.10: the newest release whose ranges Debian's nsys 2022.4 records (see shared facts)
NVTX_SPEC  ?= nvtx==0.2.10
STAMP  := $(VENV)/.installed

.PHONY: install demo test test-gpu bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)" "$(NVTX_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/nsbridge triage examples/train_cnn.py -- --epochs 1

test: install
	$(BIN)/python -m pytest -q

test-gpu: install
	$(BIN)/python -m pytest -q -m gpu

bench: install
	$(BIN)/python bench/trace_scale.py
	$(BIN)/python bench/nsys_scale.py
	$(BIN)/python bench/triage_overhead.py
	$(BIN)/python bench/nvtx_overhead.py
	$(BIN)/python bench/deep_cost.py

clean:
	rm -rf $(VENV) nsbridge-runs .pytest_cache
