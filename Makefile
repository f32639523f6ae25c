# Two commands do all the set-up on a fresh machine:
#   make demo   -> builds .venv, installs arenum with its demo extras, runs the demo
#   make test   -> builds .venv, installs every extra the tests need, runs the tests
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[hf,demo,plot,progress,test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/arenum demo

test: $(STAMP)
	$(BIN)/python -m pytest src tests

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_core.py

clean:
	rm -rf $(VENV)
