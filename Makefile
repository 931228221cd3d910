# Quick start: `make run` trains the main example; `make test` runs the tests.
# Both create .venv and install into it; torch comes from the pinned CPU wheel (constraints.txt).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip install -q --disable-pip-version-check -c constraints.txt

.PHONY: install run test bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) torch==2.13.0
	$(PIP) -e '.[run,test]'
	touch $@

run: install
	$(VENV)/bin/rlgraph run specs/ppo_arith.rl

test: install
	$(PY) -m pytest

bench: install
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
