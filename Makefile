# The two commands a newcomer needs: `make run` and `make test` (`make help` lists the others).
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
# make test runs the suite in parallel (pytest-xdist): each worker has its own database and Redis
# database (tests/parallel.py). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3
XDIST := $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadgroup)

# The suite starts a few hundred Python processes (gunicorn, workers, the command line); each one
# compiling the project from source when the environment says PYTHONDONTWRITEBYTECODE (as this
# machine's does) cost the part of the suite that starts processes about a minute. Python ignores
# the variable when it is empty; __pycache__ is in .gitignore.
test test-fast test-future scenarios: export PYTHONDONTWRITEBYTECODE :=

.PHONY: help install install-test run test test-fast test-future lint scenarios fuzz bench clean client cluster cluster-down drill

## make help: this list.
help:
	@sed -n 's/^## //p' $(MAKEFILE_LIST)

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# One stamp per set of requirements, so that switching between `make run` and `make test`
# installs only what the other one is missing.
$(VENV)/.installed-run: requirements.txt requirements-dev.txt | $(PY)
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

# The suite starts `make run` itself (tests/ops/test_embedded_servers.py): its requirements
# include the development runner's.
$(VENV)/.installed-test: requirements.txt requirements-dev.txt requirements-test.txt tests/oidc/node_modules/.package-lock.json | $(PY)
	$(PY) -m pip install --quiet -r requirements-test.txt
	touch $@

# The OpenID provider the single sign-on tests sign in against (npm oidc-provider, pinned by its lock file).
tests/oidc/node_modules/.package-lock.json: tests/oidc/package.json tests/oidc/package-lock.json
	cd tests/oidc && npm ci --no-audit --no-fund --silent

## make install: the service's runtime requirements plus the development runner (honcho).
install: $(VENV)/.installed-run

## make install-test: the runtime requirements, honcho (the suite runs make run) and the test suite's tools.
install-test: $(VENV)/.installed-test

## make run: API + worker + simulator on an embedded PostgreSQL and Redis (instance/), with a demo key;
## Ctrl-C or a SIGTERM stops them all, the embedded servers included.
run: install
	$(PY) -m app.dev

## make test: the whole suite (real PostgreSQL and Redis: embedded ones for the session unless
## TEST_DATABASE_URL / TEST_REDIS_URL are set; simulator over HTTP, real processes, Chromium).
test: install-test
	@test -x /usr/bin/chromium || echo "NOTE: /usr/bin/chromium is missing: the browser tests will be SKIPPED (apt-get install chromium)"
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

## make test-fast: the suite without the tests that start real processes or run long (-m "not processes and not slow").
test-fast: install-test
	$(PY) -m pytest $(XDIST) -m "not processes and not slow" $(PYTEST_ARGS)

## make test-future: the whole suite with the clock a year ahead (Debian's faketime), so that no
## test depends on today's date. The monotonic clock stays real: libfaketime would otherwise turn
## the timed waits of locks and sockets into year-long ones (tests/future/sitecustomize.py mends
## time.sleep, which the library then breaks).
FUTURE ?= +365d
test-future: install-test
	@command -v faketime >/dev/null || { echo "faketime is missing: apt-get install -y faketime" >&2; exit 2; }
	PYTHONPATH=$(CURDIR)/tests/future FAKETIME_DONT_FAKE_MONOTONIC=1 faketime -f '$(FUTURE)' $(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

## make lint: ruff (rules in pyproject.toml, each ignore explained) and mypy on the services (setup.cfg).
lint: install-test
	$(PY) -m ruff check .
	$(PY) -m mypy

## make client: install the Python client and its command line (scan-api) into the virtualenv.
client: | $(PY)
	$(PY) -m pip install --quiet ./client

## make clean: remove the virtualenv, the instance folder and test artifacts.
clean:
	rm -rf $(VENV) instance artifacts .pytest_cache

## make scenarios: the QA scenarios end to end (pytest, one test per file), against API + worker + simulator
## started as real processes on free ports (SCENARIO_API_PORT=9100 SCENARIO_SIM_PORT=9700: those ports).
## PYTEST_ARGS='-k bulk', '-m webhooks', '-v', '-n auto', '--junitxml=FILE'.
# The scenarios run under pytest, so this installs the test tools (after `make run`, which
# installs only the runtime and honcho, a bare `install` left pytest missing).
scenarios: install-test
	$(PY) -m simulator scenario all $(PYTEST_ARGS)

## make fuzz: schemathesis and the hostile-input tests with many more generated cases, random each run
## (FUZZ_EXAMPLES per operation and generation mode; CI runs 25, derandomized).
FUZZ_EXAMPLES ?= 300
fuzz: install-test
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/security/test_fuzz.py -q -p no:cacheprovider $(PYTEST_ARGS)

## make bench: the real stack on this machine (PostgreSQL db "bench", Redis db 11, gunicorn, workers,
## simulator), driven by wrk; raw outputs written locally to bench/results/<UTC time>/ (untracked;
## the figures are in docs/performance.md). BENCH_ARGS=--quick
BENCH_ARGS ?=
bench: install
	@command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 2; }
	$(PY) -m bench $(BENCH_ARGS)

## make cluster: the reference cluster on this machine, as root: a load balancer, 2 API hosts, 2 worker
## hosts, PostgreSQL on 2 hosts under Patroni, Redis on 2 hosts with 3 Sentinels, the simulator, each a
## network namespace in 198.18.0.0/24 (ops/cluster/cluster.py). Prints the API's address and a demo key,
## runs until Ctrl-C; needs Debian's patroni etcd-server haproxy redis-server redis-sentinel postgresql-15.
cluster: install
	$(PY) ops/cluster/cluster.py up

## make cluster-down: stop a cluster left running (its processes, namespaces, bridge and state).
cluster-down: | $(PY)
	$(PY) ops/cluster/cluster.py down

## make drill: `make cluster` under bounded load through four faults (a worker host cut off for a
## minute, an API host killed, the Redis master killed, the PostgreSQL primary's host killed), printing
## per fault what was sent, answered, 503 and other, seconds to recover, scans found and final, the books
## and webhooks (ops/cluster/drill.py; figures in docs/reliability.md). About 10 minutes; stops the cluster.
drill: install
	$(PY) ops/cluster/drill.py
