# The two commands of the README's Quick start: `make run` and `make test`.
# Both set everything up from a fresh clone first (idempotent; a warm run downloads nothing).
PY      ?= python3
VENV    := .venv
STAMP   := $(VENV)/.installed

.PHONY: setup run test test-unit lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)
	@command -v kcat >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat >/dev/null; }
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }
	$(VENV)/bin/ttl setup --object-store

run: setup
	$(VENV)/bin/ttl run --conf conf/local.toml --demo 50

test: setup
	$(VENV)/bin/pytest

test-unit: setup
	$(VENV)/bin/pytest tests/unit

lint: $(STAMP)
	$(VENV)/bin/ruff check ttl jobs tests

clean:
	rm -rf data $(VENV)
