# Two commands on a fresh Debian machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=
# Real servers on 2 shared cores: a timing-sensitive scenario that fails is run once more, and the
# summary lists it as a rerun (a real failure fails twice).
RERUNS ?= --reruns 1 --reruns-delay 1

.PHONY: run test test-all bench lint clean venv deb test-deb deb-prereqs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# an editable install compiles none of our sources: compiled here, `edged run` starts from bytecode even
# where PYTHONDONTWRITEBYTECODE is set (as the .deb's postinst does for /usr/lib/edged)
COMPILE = $(BIN)/python -m compileall -q edged bridges storage hw pipeline >/dev/null

$(VENV)/.installed: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e .
	$(COMPILE)
	touch $@

# the pipeline's tests run Spark, which needs a Java 17 runtime: Debian's, installed when `java` is missing;
# the MQTT tests run mosquitto_pub/sub and the mosquitto broker: Debian's, installed when missing
$(VENV)/.installed-test: $(BIN)/python pyproject.toml
	$(BIN)/pip install -q -e '.[test,spark]'
	$(COMPILE)
	@command -v java >/dev/null 2>&1 || { \
		echo "java not found: installing openjdk-17-jre-headless (Spark needs it)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q openjdk-17-jre-headless; }
	@{ command -v mosquitto_pub && { command -v mosquitto || test -x /usr/sbin/mosquitto; }; } >/dev/null 2>&1 || { \
		echo "mosquitto not found: installing mosquitto-clients and mosquitto (MQTT tests, bridge, bench)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q mosquitto-clients mosquitto; }
	@[ ! -x /usr/bin/python3 ] || /usr/bin/python3 -c 'import systemd.daemon' 2>/dev/null || { \
		echo "python3-systemd not found: installing it (the systemd notify tests use Debian's)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q python3-systemd || true; }
	touch $@

# nats.js, a real peer for some tests (tests/support/natsjs): Debian's node and npm when missing
NATSJS := tests/support/natsjs
$(NATSJS)/node_modules/.installed: $(NATSJS)/package.json $(NATSJS)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { \
		echo "npm not found: installing nodejs and npm (nats.js tests need them)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q nodejs npm; }
	cd $(NATSJS) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

venv: $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/edged run -c edged/default.conf

test: $(VENV)/.installed-test $(NATSJS)/node_modules/.installed
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 -q $(RERUNS) $(PYTEST_ARGS)

test-all: $(VENV)/.installed-test $(NATSJS)/node_modules/.installed
	$(MAKE) deb-prereqs WITH_TEST_TOOLS=1
	$(BIN)/python -m pytest -n 2 -q -m '' $(RERUNS) $(PYTEST_ARGS)

$(VENV)/.installed-bench: $(VENV)/.installed-test pyproject.toml .venv-amqtt/bin/amqtt
	$(BIN)/pip install -q -e '.[test,spark,speed]'
	touch $@

# amqtt (bench/mqtt.py's fourth broker) pins websockets 15, older than edged needs: a venv of its own
.venv-amqtt/bin/amqtt:
	$(PYTHON) -m venv .venv-amqtt
	.venv-amqtt/bin/pip install -q 'amqtt>=0.11'

# benchmarks run with uvloop (extra `speed`), as a production install would
bench: $(VENV)/.installed-bench
	$(BIN)/python -m bench $(BENCH_ARGS)

# the .deb (packaging/README.md): make deb [ARCH=amd64|arm64|armhf] writes dist/edged_<version>_<arch>.deb
ARCH ?= $(shell dpkg --print-architecture 2>/dev/null || echo amd64)
STRIP_TOOL_amd64 := x86_64-linux-gnu-strip:binutils-x86-64-linux-gnu
STRIP_TOOL_arm64 := aarch64-linux-gnu-strip:binutils-aarch64-linux-gnu
STRIP_TOOL_armhf := arm-linux-gnueabihf-strip:binutils-arm-linux-gnueabihf arm-linux-gnueabihf-gcc:gcc-arm-linux-gnueabihf
DEB_TOOLS := dpkg-deb:dpkg-dev lintian:lintian $(STRIP_TOOL_$(ARCH))
TEST_DEB_TOOLS := debootstrap:debootstrap systemd-nspawn:systemd-container qemu-aarch64-static:qemu-user-static \
	update-binfmts:binfmt-support $(STRIP_TOOL_amd64) $(STRIP_TOOL_arm64) $(STRIP_TOOL_armhf)
deb-prereqs:
	@need=""; for t in $(DEB_TOOLS) $(if $(WITH_TEST_TOOLS),$(TEST_DEB_TOOLS)); do \
		command -v $${t%%:*} >/dev/null 2>&1 || need="$$need $${t#*:}"; done; \
	if [ -n "$$need" ]; then echo "installing build prerequisites:$$need"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q $$need; fi

deb: $(BIN)/python deb-prereqs
	$(BIN)/python packaging/build_deb.py --arch $(ARCH)

# the package end to end as root: build, lintian, a bookworm root booted by systemd-nspawn, an arm64 root
# under qemu-user (roots cached in build/roots; slow the first time)
test-deb: $(VENV)/.installed-test
	$(MAKE) deb-prereqs WITH_TEST_TOOLS=1
	$(BIN)/python -m pytest -q -m slow -p no:randomly tests/packaging $(PYTEST_ARGS)

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) var build dist *.egg-info
