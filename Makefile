# pdfleet: the two commands a newcomer runs (both do all set-up themselves, on a fresh Debian/Ubuntu host):
#   make site   - create the simulated cluster and run site.yml on it (root)
#   make test   - run the test suite
VENV ?= .venv
STAMP := $(VENV)/.pdfleet-installed
PYTHON ?= python3
PYTEST_ARGS ?=

.PHONY: site test setup host-packages lint clean-sim

site: setup
	$(VENV)/bin/ansible-playbook site.yml

test: setup
	@$(VENV)/bin/python tests/preflight.py
	@$(VENV)/bin/pytest $(PYTEST_ARGS); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "pdfleet: pytest collected no tests: that is a failure" >&2; fi; exit $$rc

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ansible-lint

setup: host-packages $(STAMP)

host-packages:
	@bash scripts/host-packages.sh

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $@

clean-sim: setup
	$(VENV)/bin/pdfleet sim down
