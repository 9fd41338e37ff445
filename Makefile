# Two commands on a fresh Debian machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: run test test-all bench lint clean venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/edged run -c edged/default.conf

test: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 -q $(PYTEST_ARGS)

test-all: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n 2 -q -m '' $(PYTEST_ARGS)

$(VENV)/.installed-bench: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[test,speed]'
	touch $@

# benchmarks run with uvloop (extra `speed`), as a production install would
bench: $(VENV)/.installed-bench
	$(BIN)/python -m bench $(BENCH_ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) var build *.egg-info
