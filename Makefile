# pdfleet: the two commands a newcomer runs (both do all set-up themselves, on a fresh Debian/Ubuntu host):
#   make site   - create the simulated cluster and run site.yml on it (root)
#   make test   - run the test suite (make test-long: the long tier, on demand)
VENV ?= .venv
STAMP := $(VENV)/.pdfleet-installed
DEV_STAMP := $(VENV)/.pdfleet-dev-installed
PYTHON ?= python3
PYTEST_ARGS ?=

.PHONY: site test test-long setup host-packages sim-images lint clean-sim

# The simulated hosts' golden image and CPU runtime start building in the background first (this machine's python3:
# pdfleet_sim.build needs nothing from the venv), so they build while the venv installs; site.yml waits only for
# what is not done by then.
site: host-packages sim-images $(STAMP)
	$(VENV)/bin/ansible-playbook site.yml

sim-images:
	@PYTHONPATH=scripts:scripts/sim $(PYTHON) -m pdfleet_sim.build --start

# Every run of the suite prints its 25 slowest tests and leaves a JUnit XML under reports/ (CI keeps both).
PYTEST_REPORT = --durations=25 --junitxml=reports/junit.xml

# tests/suite.py runs the fleet scenario (tests/scenario) beside the rest, two pytest processes at once (its
# docstring says why and how); with PYTEST_ARGS it runs one pytest with them. pytest's exit 5 (no test collected)
# is a failure.
test: setup
	@bash scripts/host-packages.sh --tests
	@$(VENV)/bin/python tests/machine_check.py
	@mkdir -p reports
	@$(VENV)/bin/python tests/suite.py $(PYTEST_REPORT) $(PYTEST_ARGS)

# The long tier: extra depth (other distributions, the pypi install mode, the whole fault catalogue, ...).
# Never the only proof of a claim: each claim the README makes is proved by `make test`.
test-long: setup
	@bash scripts/host-packages.sh --tests
	@$(VENV)/bin/python tests/machine_check.py
	@mkdir -p reports
	@$(VENV)/bin/python tests/suite.py -m long --durations=25 --junitxml=reports/junit-long.xml $(PYTEST_ARGS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ansible-lint

setup: host-packages $(DEV_STAMP)

host-packages:
	@bash scripts/host-packages.sh

# pdfleet and, from scripts/sim, the separate pdfleet-sim distribution (the simulator, `pdfleet sim`, test helpers):
# all `make site` needs. The test and lint tools (the dev extra) come on top, for make test and make lint.
# --no-compile: pip would byte-compile every module of the ansible package's collections (about 15 s of a cold
# install); Python compiles and caches the few a run imports when it first imports them.
$(STAMP): pyproject.toml scripts/sim/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet --no-compile -e . -e scripts/sim
	touch $@

$(DEV_STAMP): $(STAMP)
	$(VENV)/bin/pip install --quiet --no-compile -e '.[dev]' -e scripts/sim
	touch $@

clean-sim: setup
	$(VENV)/bin/pdfleet sim down
