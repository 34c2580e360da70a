PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python

.PHONY: test bench bench-quick stress clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

test: $(VENV)/.installed
	$(PY) -m pytest

bench: $(VENV)/.installed
	$(PY) -m stress.compare

bench-quick: $(VENV)/.installed
	$(PY) -m stress.compare --quick

stress: $(VENV)/.installed
	$(PY) -m stress --duration 60

clean:
	rm -rf $(VENV) build *.egg-info
