# The README quotes two targets: `make run` and `make check`. Both set up first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DATA_DIR ?= .jobledger

.PHONY: setup browser compose pgbouncer run check lint typecheck imports test bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip setuptools wheel

# Strict editable mode links every file explicitly, so a new module only appears
# after a re-install: that is why setup always runs it (a no-op when nothing changed).
# setuptools explains strict mode in a warning on every install; it is expected here.
# The package's bytecode is compiled here, once: where PYTHONDONTWRITEBYTECODE is set,
# every process (each role and command the tests start) would compile it again.
setup: $(BIN)/python
	PYTHONWARNINGS=ignore::UserWarning $(BIN)/python -m pip install --quiet --no-build-isolation \
		--config-settings editable_mode=strict -e '.[dev]'
	$(BIN)/python -c 'import compileall, pathlib, jobledger; \
		compileall.compile_dir(pathlib.Path(jobledger.__file__).parent, quiet=1, workers=0)'

run: setup
	$(BIN)/jobledger --data-dir $(DATA_DIR) dev

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy
	$(BIN)/mypy tests bench examples deploy

imports: setup
	$(BIN)/lint-imports

# The dashboard's browser tests drive Debian's Chromium. Install it, quietly, only when
# it is missing (apt-get needs root, as in CI); without it those tests skip, or fail
# when JOBLEDGER_REQUIRE_SERVICES is set.
CHROMIUM ?= /usr/bin/chromium

browser:
	@test -x $(CHROMIUM) || { \
		echo "installing Debian's chromium for the browser tests" >&2; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends chromium; } >/dev/null 2>&1 \
		|| echo "chromium could not be installed: the browser tests cannot run" >&2; }

# The deployment test validates docker-compose.yml with `docker compose config` (or the
# standalone docker-compose where the docker client has no compose plugin).
compose:
	@docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null || { \
		echo "installing Debian's docker-compose for the deployment test" >&2; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends docker-compose; } >/dev/null 2>&1 \
		|| echo "docker-compose could not be installed: the compose test cannot run" >&2; }

# tests/integration/test_pgbouncer.py runs jobledger behind Debian's PgBouncer.
pgbouncer:
	@command -v pgbouncer >/dev/null || test -x /usr/sbin/pgbouncer || { \
		echo "installing Debian's pgbouncer for the connection pooler test" >&2; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			--no-install-recommends pgbouncer; } >/dev/null 2>&1 \
		|| echo "pgbouncer could not be installed: the pooler test cannot run" >&2; }

# Two processes for the bulk of the tests (they mostly wait on servers and subprocesses);
# the modules that run role processes on the shared PostgreSQL share one of them (the
# server's connections), and the tests marked serial run alone afterwards, as they
# measure rates or load the machine. The slowest tests are listed, to keep the suite short.
test: setup browser compose pgbouncer
	$(BIN)/pytest -n 2 --dist loadgroup -m "not serial" --durations=15
	$(BIN)/pytest -m serial

check: lint typecheck imports test

bench: setup
	$(BIN)/python -m bench.event_store

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .pytest_cache .ruff_cache
