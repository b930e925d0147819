# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: install run test scenarios fuzz bench clean

$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

install: $(VENV)/.installed

## make run: API + worker + simulator on SQLite and an embedded Redis, with a demo key.
run: install
	$(PY) -m app.dev

## make test: the whole suite (real Redis, real database, simulator over HTTP).
test: install
	@test -x /usr/bin/chromium || echo "NOTE: /usr/bin/chromium is missing: the browser tests will be SKIPPED (apt-get install chromium)"
	$(PY) -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) instance artifacts .pytest_cache

## make scenarios: the QA scenarios end to end (pytest, one test per file), against API + worker + simulator
## started as real processes. PYTEST_ARGS='-k bulk', '-m webhooks', '-v', '-n auto', '--junitxml=FILE'.
scenarios: install
	$(PY) -m simulator scenario all $(PYTEST_ARGS)

## make fuzz: schemathesis and the hostile-input tests with many more generated cases, random each run
## (FUZZ_EXAMPLES per operation and generation mode; CI runs 25, derandomized).
FUZZ_EXAMPLES ?= 300
fuzz: install
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(PY) -m pytest tests/security/test_fuzz.py -q -p no:cacheprovider $(PYTEST_ARGS)

## make bench: the real stack on this machine (PostgreSQL db "bench", Redis db 11, gunicorn, workers,
## simulator), driven by wrk; figures in bench/results/<UTC time>/ (docs/performance.md). BENCH_ARGS=--quick
BENCH_ARGS ?=
bench: install
	@command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 2; }
	$(PY) -m bench $(BENCH_ARGS)
