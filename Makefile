# nsbridge developer targets. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# torch for this machine. PyPI's Linux wheel of torch carries CUDA and runs on a CPU too;
# without an NVIDIA GPU (nvidia-smi finds none) TORCH_INDEX can point pip at a CPU-only
# index for a much smaller wheel. Either is a variable: make TORCH_SPEC="torch==2.12.0" demo
TORCH_SPEC  ?= torch==2.13.0
TORCH_INDEX ?=
HAS_GPU     := $(shell nvidia-smi -L >/dev/null 2>&1 && echo yes)
CPU_INDEX   := https://download.pytorch.org/whl/cpu
TORCH_CHOICE = $(if $(HAS_GPU),an NVIDIA GPU answered nvidia-smi: installing $(TORCH_SPEC) with \
  CUDA,no NVIDIA GPU found: installing $(TORCH_SPEC)$(if $(TORCH_INDEX), from $(TORCH_INDEX),\
   from PyPI (the wheel pip picks; on Linux usually the CUDA build, which runs on the CPU \
  too: make TORCH_INDEX=$(CPU_INDEX) install picks the smaller CPU-only build)))
STAMP  := $(VENV)/.installed

.PHONY: install demo demo-gate test test-fast test-gpu fuzz docs docs-reference dist bench clean

# nsbridge's own Make targets (profile-triage, profile-timeline, profile-deep, perf-gate),
# run with this checkout's venv: e.g. make profile-triage SCRIPT=examples/train_cnn.py
NSBRIDGE := $(BIN)/nsbridge
include nsbridge/make/nsbridge.mk
profile-triage profile-timeline profile-deep perf-gate: install
.DEFAULT_GOAL := demo

# setup.py compiles the C trace scanner: a changed one reinstalls (rebuilds) it
$(STAMP): pyproject.toml setup.py nsbridge/parse/_scan.c
	$(PYTHON) -m venv $(VENV)
	@echo "nsbridge: $(TORCH_CHOICE); make TORCH_SPEC=... install picks another"
	$(BIN)/python -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	@$(BIN)/python -c "import torch; print('nsbridge: torch', torch.__version__, \
	'(CUDA ' + torch.version.cuda + ')' if torch.version.cuda else '(CPU only)')"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/nsbridge triage examples/train_cnn.py -- --epochs 1
	@echo "nsbridge is installed in $(VENV): run $(BIN)/nsbridge, or source $(BIN)/activate \
	and then nsbridge (pip install $(CURDIR) puts it in another environment)"

# the perf gate on the bundled example: a baseline run, and a run with a planted slowdown
# (extra matmuls; NSBRIDGE_* variables are recorded in the run's manifest), measured again
# in interleaved pairs by `nsbridge gate`: it fails and names aten::mm
demo-gate: install
	rm -rf nsbridge-runs/gate-base nsbridge-runs/gate-new
	$(NSBRIDGE) -q triage --threads 1 --out nsbridge-runs/gate-base examples/train_cnn.py -- --steps 30 > /dev/null
	NSBRIDGE_EXAMPLE_SLOW_MATMULS=64 $(NSBRIDGE) -q triage --threads 1 --out nsbridge-runs/gate-new examples/train_cnn.py -- --steps 30 > /dev/null
	-$(MAKE) --no-print-directory perf-gate BASE=nsbridge-runs/gate-base NEW=nsbridge-runs/gate-new PROCESSES=3 GATE_STEPS=20

test: install
	$(BIN)/python -m pytest -q --durations=15

# the edit-run loop: the tests that start no process (not marked slow or gpu; conftest.py checks)
test-fast: install
	$(BIN)/python -m pytest -q -m "not slow and not gpu"

test-gpu: install
	$(BIN)/python -m pytest -q -m gpu

# every case of every fuzzer's sweep, before a release (`make test` runs one variant of each
# field and value, tests/sweeps.py); NSBRIDGE_FUZZ_CASES=20000 for more mutated traces
fuzz: install
	NSBRIDGE_FUZZ=all $(BIN)/python -m pytest -q -m slow tests/test_fuzz_*.py

# the reference pages' generated blocks, rewritten from the code (tests/test_docs.py fails
# while a committed block differs from it)
docs-reference: install
	$(BIN)/python docs/_hooks/generated.py

# the docs site in site/ (MkDocs; warnings and broken internal links are errors)
docs: install
	$(BIN)/mkdocs build --strict

# release artifacts in dist/: sdist + manylinux wheel, twine-checked, each installed in a
# fresh venv (the sdist also without a C compiler) and run (.ci/dist.sh)
dist:
	PYTHON=$(PYTHON) bash .ci/dist.sh

bench: install
	$(BIN)/python bench/trace_scale.py
	$(BIN)/python bench/nsys_scale.py
	$(BIN)/python bench/ranks_scale.py
	$(BIN)/python bench/triage_overhead.py
	$(BIN)/python bench/nvtx_overhead.py
	$(BIN)/python bench/deep_cost.py
	$(BIN)/python bench/gate_quality.py

clean:
	rm -rf $(VENV) nsbridge-runs .pytest_cache build site dist nsbridge/parse/_scan.*.so
