# Two commands on a fresh Debian machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=
# Real servers on 2 shared cores: a timing-sensitive scenario that fails is run once more, and the
# summary lists it as a rerun (a real failure fails twice).
RERUNS ?= --reruns 1 --reruns-delay 1

.PHONY: run test test-all bench lint clean venv

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e .
	touch $@

# the pipeline's tests run Spark, which needs a Java 17 runtime: Debian's, installed when `java` is missing;
# the MQTT tests run mosquitto_pub/sub and the mosquitto broker: Debian's, installed when missing
$(VENV)/.installed-test: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[test,spark]'
	@command -v java >/dev/null 2>&1 || { \
		echo "java not found: installing openjdk-17-jre-headless (Spark needs it)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q openjdk-17-jre-headless; }
	@{ command -v mosquitto_pub && { command -v mosquitto || test -x /usr/sbin/mosquitto; }; } >/dev/null 2>&1 || { \
		echo "mosquitto not found: installing mosquitto-clients and mosquitto (MQTT tests, bridge, bench)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q mosquitto-clients mosquitto; }
	touch $@

venv: $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/edged run -c edged/default.conf

test: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 -q $(RERUNS) $(PYTEST_ARGS)

test-all: $(VENV)/.installed-test
	$(BIN)/python -m pytest -n 2 -q -m '' $(RERUNS) $(PYTEST_ARGS)

$(VENV)/.installed-bench: $(VENV)/.installed-test pyproject.toml
	$(BIN)/pip install -q -e '.[test,spark,speed,bench]'
	touch $@

# benchmarks run with uvloop (extra `speed`), as a production install would
bench: $(VENV)/.installed-bench
	$(BIN)/python -m bench $(BENCH_ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) var build *.egg-info
