# The README quotes two targets: `make run` and `make check`. Both set up first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DATA_DIR ?= .jobledger

.PHONY: setup run check lint typecheck imports test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel

# Strict editable mode links every file explicitly, so a new module only appears
# after a re-install: that is why setup always runs it (a no-op when nothing changed).
# setuptools explains strict mode in a warning on every install; it is expected here.
setup: $(BIN)/python
	PYTHONWARNINGS=ignore::UserWarning $(BIN)/python -m pip install --quiet --no-build-isolation \
		--config-settings editable_mode=strict -e '.[dev]'

run: setup
	$(BIN)/jobledger --data-dir $(DATA_DIR) migrate
	$(BIN)/jobledger --data-dir $(DATA_DIR) status

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy
	$(BIN)/mypy tests bench

imports: setup
	$(BIN)/lint-imports

test: setup
	$(BIN)/pytest

check: lint typecheck imports test

bench: setup
	$(BIN)/python bench/event_store.py

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache
