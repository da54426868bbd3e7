# Two things a person runs: `make demo` (the main job, end to end, on embedded
# defaults) and `make test` (lint, types, the whole test suite over real Kafka).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: install native jvm wheel demo test unit flaky lint kafka prometheus postgres clean

# sluicegate with its native Kafka reader (native/, Rust): one maturin build, as the wheel
# users install is (docs/packaging.md), installed editable. Cargo's target dir is kept
# outside the clone, shared by every clone on this machine: a few minutes the first time,
# seconds after a Rust edit.
NATIVE_TARGET ?= $(HOME)/.cache/sluicegate/native-target
NATIVE_SRC := $(wildcard native/Cargo.toml native/Cargo.lock native/src/*.rs)

$(BIN)/.installed: pyproject.toml $(NATIVE_SRC)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@command -v cargo >/dev/null 2>&1 || { echo "cargo not found: sluicegate's native Kafka reader needs Rust (https://rustup.rs)"; exit 1; }
	@echo "installing sluicegate and its native Kafka reader (cargo: minutes the first time on this machine)"
	CARGO_TARGET_DIR=$(NATIVE_TARGET) CARGO_BUILD_JOBS=2 $(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

native: $(BIN)/.installed  ## rebuild the native kafka reader after a Rust edit

# The JVM read path's jar (readPath=jvm; src/sluicegate/spark/jvm_sources, Java 17): compiled
# into the package (src/sluicegate/spark/jvm/, which the wheel ships) against PySpark and
# Spark's Kafka source (~3 s; the Kafka source's jars come from Maven Central once, as for
# the broker). Without a JDK one line says so and readPath=jvm fails naming why: install
# never fails for it (`make wheel` does).
JVM_SRC := $(shell find src/sluicegate/spark/jvm_sources -type f 2>/dev/null)

$(VENV)/.jvm: $(BIN)/.installed $(JVM_SRC)
	@$(BIN)/python -m sluicegate.devtools.jvm_build && touch $@

jvm: $(VENV)/.jvm  ## the JVM read path's jar alone

install: $(BIN)/.installed $(VENV)/.jvm

wheel: install  ## the wheel users install (native reader and jar inside) into dist/
	$(BIN)/python -m sluicegate.devtools.wheel --out dist

kafka: install  ## resolve Apache Kafka from Maven Central into the cache (first run only)
	$(BIN)/sluicegate broker fetch

demo: install kafka
	$(BIN)/sluicegate demo

lint: install  ## ruff, mypy --strict, and the import contracts of .importlinter (the layers)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Prometheus' server and promtool (Debian's package) for the tests of the shipped alert rules
# (tests/unit/test_alert_rules.py, tests/integration/test_alerting.py): installed with apt where
# missing. Where that cannot be done, one line says so and those tests are skipped, naming it.
APT_INSTALL := env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus
prometheus:
	@if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "prometheus: not installed and no apt-get here (the alert-rule tests will be skipped)"; \
	else \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  echo "prometheus: installing Debian's package (server and promtool) for the alert-rule tests"; \
	  $$sudo $(APT_INSTALL) >/dev/null 2>&1 || \
	    { $$sudo apt-get update -qq >/dev/null 2>&1 && $$sudo $(APT_INSTALL) >/dev/null 2>&1; } || \
	    echo "prometheus: apt could not install it (the alert-rule tests will be skipped)"; \
	fi

# PostgreSQL's server (Debian's package: initdb, pg_ctl) for the tests of the postgres
# connector (tests/support/postgres_server.py starts one per session on a free port):
# installed with apt where missing, as Prometheus is; where that cannot be done those tests
# are skipped, naming it.
PG_INSTALL := env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql
postgres:
	@if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "postgres: not installed and no apt-get here (the postgres connector's tests will be skipped)"; \
	else \
	  sudo=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  echo "postgres: installing Debian's postgresql package for the postgres connector's tests"; \
	  $$sudo $(PG_INSTALL) >/dev/null 2>&1 || \
	    { $$sudo apt-get update -qq >/dev/null 2>&1 && $$sudo $(PG_INSTALL) >/dev/null 2>&1; } || \
	    echo "postgres: apt could not install it (the postgres connector's tests will be skipped)"; \
	fi

# Two lanes at once: the tests that start Spark (marked `spark`: a JVM and its Python
# workers each) one after another in one pytest, everything else in a second pytest beside
# it, each lane with its own broker. The suite mostly waits (on brokers, processes,
# timeouts), so on 2 cores it takes about as long as the longer lane instead of the sum
# (31-39 min against ~53). The other lane runs at nice 10: Spark gives a Python worker a
# fixed 10 s to start and connect back (PythonWorkerFactory), and at equal priority a burst
# of the other lane's process starts once kept one from doing so. Starved so, a reader can
# also miss its session timeout while it runs: the coordinator fences it before its splits
# move (docs/protocol.md, "A reader paused past its session timeout"); before that fence a
# two-lane run wrote rows twice. `make test LANES=1` runs one pytest, one test at a time.
LANES ?= 2
SPARK_LANE_LOG := .pytest-spark-lane.log
test: lint kafka prometheus postgres
ifeq ($(LANES),1)
	$(BIN)/pytest -q --durations=10
else
	@echo "the tests marked spark run in a second pytest beside these; its report follows theirs ($(SPARK_LANE_LOG))"
	@$(BIN)/pytest -q --durations=5 -m spark -o cache_dir=.pytest_cache/spark-lane > $(SPARK_LANE_LOG) 2>&1 & spark=$$!; \
	nice -n 10 $(BIN)/pytest -q --durations=10 -m "not spark"; others=$$?; \
	wait $$spark; spark_lane=$$?; \
	echo; echo "== the Spark lane (pytest -m spark) =="; cat $(SPARK_LANE_LOG); \
	test $$others = 0 && test $$spark_lane = 0
endif

unit: install  ## the tests that need no Kafka, no JVM: seconds
	$(BIN)/pytest -q -m "not kafka" tests/unit tests/contract/test_memory_channel.py tests/contract/test_memory_log.py

# Flaky tests show here, not in CI: the chosen tests RUNS times (HOG processes spinning on
# the CPU beside, as a shared CI machine is loaded), each test's pass rate at the end.
TESTS ?= tests/integration tests/e2e
RUNS  ?= 5
HOG   ?= 0
flaky: install kafka
	$(BIN)/python -m sluicegate.devtools.flaky $(TESTS) --runs $(RUNS) --hog $(HOG)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
