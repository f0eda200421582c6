# attnlab: two commands on a fresh machine.
#   make run    create .venv, install attnlab, start the main job (PORT=8080 for another port)
#   make test   create .venv with the dev extras, run ruff and pytest
# Optional: make bench (side-by-side benchmarks; install torch==2.13.0 for the PyTorch column),
#           make loadtest (attnlab serve under 2,000 requests at concurrency 32, loopback only),
#           make fuzz (not in CI: schemathesis against a live server, hypothesis at 10x; hours).

PYTHON ?= python3
PORT   ?= 8000
VENV   ?= .venv
# Test files run on this many worker processes (pytest-xdist), each file whole on one worker so
# its module fixtures (a browser, a server, a trained model) start once. TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q

.PHONY: run test lint bench loadtest fuzz clean tiny-lm

$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -e .
	touch $@

$(VENV)/.dev: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -e '.[dev]'
	touch $(VENV)/.base $@

run: $(VENV)/.base
	$(VENV)/bin/attnlab serve --open --port $(PORT)

lint: $(VENV)/.dev
	$(PY) -m ruff check src tests
	$(PY) -m ruff format --check src tests

test: lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

bench: $(VENV)/.dev
	$(VENV)/bin/attnlab bench labs
	$(VENV)/bin/attnlab bench attention
	$(VENV)/bin/attnlab bench small

# Rebuild the small language model shipped in the package (attnlab/models/shipped/tiny-lm) from
# scratch, trained by attnlab on its own corpus, and print its held-out accuracy.
tiny-lm: $(VENV)/.base
	$(PY) -m attnlab.transformer.tiny_lm

loadtest: $(VENV)/.dev
	$(PY) -m attnlab.web.loadtest

FUZZ_REQUESTS     ?= 20000
FUZZ_LAB_REQUESTS ?= 2000
FUZZ_RATE         ?= 40/s
FUZZ_SCALE        ?= 10
FUZZ_TESTS        ?= tests

# The quick routes take FUZZ_REQUESTS; the lab routes (up to 2 s a run) FUZZ_LAB_REQUESTS.
fuzz: $(VENV)/.dev
	rm -f test-artifacts/fuzz-summary.json  # each part adds itself; start from none
	$(PY) tests/fuzz_live.py --parts api --label api --exclude-paths '^/api/labs/' \
		--requests $(FUZZ_REQUESTS) --rate $(FUZZ_RATE)
	$(PY) tests/fuzz_live.py --parts api --label api-labs --paths '^/api/labs/' \
		--requests $(FUZZ_LAB_REQUESTS) --rate $(FUZZ_RATE)
	$(PY) tests/fuzz_live.py --parts hypothesis --scale $(FUZZ_SCALE) --tests $(FUZZ_TESTS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis test-artifacts
