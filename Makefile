# Two commands do all the set-up on a fresh machine:
#   make demo   -> builds .venv, installs arenum with only what the demo needs (numpy, matplotlib, numba), runs it
#   make test   -> builds .venv, installs every extra the tests need (torch, transformers, ...), runs the tests
# Python >= 3.11 is required; an older one is refused before anything is downloaded.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test bench clean check-python

check-python:
	@$(PY) -c 'import sys; v = sys.version_info; sys.exit(0 if v >= (3, 11) else "arenum needs Python >= 3.11, but $(PY) is %d.%d: run make PY=python3.11 (or newer)" % v[:2])'

$(BIN)/python: | check-python
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(DEMO_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[demo]'
	touch $(DEMO_STAMP)

$(TEST_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[hf,demo,plot,progress,ray,fast,serve,constraints,test]'
	touch $(TEST_STAMP) $(DEMO_STAMP)

demo: check-python $(DEMO_STAMP)
	$(BIN)/arenum demo

test: check-python $(TEST_STAMP)
	$(BIN)/python -m pytest src tests

bench: check-python $(TEST_STAMP)
	$(BIN)/python benchmarks/bench_core.py

clean:
	rm -rf $(VENV)
