PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Test processes: most of the suite waits on servers, workers and subprocesses, so two share two cores well. Tests
# are handed out one at a time (loadgroup), except those marked with one xdist_group: they run in one process, so a
# module-scoped fixture they share (a training, a world, a cluster) is built once.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

.PHONY: demo test test-prod test-pgbouncer bench bench-quick clean

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python manage.py demo

test: $(STAMP)
	$(PYTEST)

# The same suite against a real PostgreSQL and Redis (set PREFEED_TEST_DATABASE_URL / PREFEED_TEST_REDIS_URL).
test-prod: $(STAMP)
	PREFEED_TEST_DATABASE_URL=$${PREFEED_TEST_DATABASE_URL:-postgresql://root@127.0.0.1:5432/test} \
	PREFEED_TEST_REDIS_URL=$${PREFEED_TEST_REDIS_URL:-redis://127.0.0.1:6379/0} \
	$(PYTEST)

# The same suite through a private PgBouncer in transaction mode in front of that PostgreSQL (needs the pgbouncer
# binary: apt-get install pgbouncer). Not part of `make test`.
test-pgbouncer: $(STAMP)
	PREFEED_TEST_DATABASE_URL=$${PREFEED_TEST_DATABASE_URL:-postgresql://root@127.0.0.1:5432/test} \
	PREFEED_TEST_REDIS_URL=$${PREFEED_TEST_REDIS_URL:-redis://127.0.0.1:6379/0} \
	$(BIN)/python -m tests.through_pgbouncer -q

bench: $(STAMP)
	$(BIN)/python -m benchmarks all

bench-quick: $(STAMP)
	$(BIN)/python -m benchmarks all --quick

clean:
	rm -rf var .pytest_cache
