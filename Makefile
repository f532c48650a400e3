# Two commands on a fresh machine (see README.md):
#   make run    install into .venv and launch the inspector (a welcome page on the first run, then the last database)
#   make test   install into .venv (with test extras) and run the whole test suite
PYTHON ?= python3
# the suite on two workers (pytest-xdist), a test file per worker; PYTEST_ARGS= runs it in one process
PYTEST_ARGS ?= -n 2 --dist loadfile
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: run test install bench lint-imports

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $@

install: $(BIN)/.installed

run: install
	$(BIN)/compaction-inspector

test: install
	$(BIN)/lint-imports
	$(BIN)/mypy
	$(BIN)/ruff check
	QT_QPA_PLATFORM=offscreen QT_API=pyside6 $(BIN)/python -m pytest -p no:cacheprovider $(PYTEST_ARGS)

bench: install
	$(BIN)/pip install --quiet -e '.[test,bench-peers]'
	$(BIN)/python benchmarks/run_all.py $(BENCH_ARGS)
