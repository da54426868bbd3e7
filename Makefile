# Two things a person runs: `make demo` (the main job, end to end, on embedded
# defaults) and `make test` (lint, types, the whole test suite over real Kafka).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: install demo test unit lint kafka clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@

install: $(BIN)/.installed

kafka: install  ## resolve Apache Kafka from Maven Central into the cache (first run only)
	$(BIN)/sluicegate broker fetch

demo: install kafka
	$(BIN)/sluicegate demo

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint kafka
	$(BIN)/pytest -q

unit: install  ## the tests that need no Kafka, no JVM: seconds
	$(BIN)/pytest -q -m "not kafka" tests/unit tests/contract/test_memory_channel.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
