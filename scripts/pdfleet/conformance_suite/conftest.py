"""Thin fixtures of the conformance suite: the inventory's plan, one testinfra host per inventory host.

    pdfleet conformance -i inventory/sim      (= pytest scripts/pdfleet/conformance_suite --inventory inventory/sim)

The suite is package code (pdfleet.conformance_suite): the installed wheel runs its own copy. Without
--inventory every test is skipped (the suite checks real or simulated hosts; tests/conformance_units/
test_suite_collection.py collects it per host in `make test`). Each failure names the host and what differs from
the plan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest
import testinfra

from pdfleet.conformance import Expectations, Target, load, source_from_option


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pdfleet conformance")
    group.addoption("--inventory", default=None, help="the inventory whose hosts the suite checks (a path, or the "
                    "JSON inventory source `pdfleet conformance` passes: paths, extra vars, vault)")
    group.addoption("--conformance-ssh-config", default=None,
                    help="ssh_config for reaching the hosts (default: the inventory's -F, or the sim's)")


def _expectations(config: pytest.Config) -> Expectations | None:
    inventory = config.getoption("--inventory", default=None)
    if not inventory:
        return None
    cached = getattr(config, "_pdfleet_conformance", None)
    if cached is None:
        cached = load(source_from_option(inventory), config.getoption("--conformance-ssh-config", default=None))
        config._pdfleet_conformance = cached  # type: ignore[attr-defined]
    return cached


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "target" not in metafunc.fixturenames:
        return
    exp = _expectations(metafunc.config)
    if exp is None:
        metafunc.parametrize("target", [pytest.param(None, marks=pytest.mark.skip(
            reason="conformance checks need --inventory (pdfleet conformance -i INVENTORY)"))], ids=["no-inventory"])
        return
    kind = getattr(metafunc.function, "pdfleet_hosts", "gpu")
    if kind == "gpu":
        chosen = [t for t in exp.targets if t.spec is not None]
    elif kind == "all":
        chosen = list(exp.targets)
    elif kind == "workers":
        chosen = [t for t in exp.targets if any(u.kind == "worker" for u in t.units)]
    else:
        chosen = [t for t in exp.targets if t.units]
    metafunc.parametrize("target", chosen, ids=[t.name for t in chosen])


@pytest.fixture(scope="session")
def expectations(request: pytest.FixtureRequest) -> Expectations:
    exp = _expectations(request.config)
    assert exp is not None
    return exp


TestFunction = TypeVar("TestFunction", bound=Callable[..., Any])

_HOSTS: dict[str, testinfra.host.Host] = {}


@pytest.fixture
def node(target: Target) -> testinfra.host.Host:
    """The target's testinfra host over the ssh:// backend (one connection per host per session)."""
    if target.name not in _HOSTS:
        kwargs = {"ssh_config": target.ssh_config} if target.ssh_config else {}
        # testinfra's ssh backend takes -F and -i; other SSH options must be in that ssh_config.
        if target.identity:
            kwargs["ssh_identity_file"] = target.identity
        _HOSTS[target.name] = testinfra.get_host(target.url, **kwargs)
    return _HOSTS[target.name]


def hosts(kind: str) -> Callable[[TestFunction], TestFunction]:
    """Decorator: which hosts a test runs on: gpu (in pdfleet_cluster.hosts), workers, units, all."""
    def mark(fn: TestFunction) -> TestFunction:
        fn.pdfleet_hosts = kind
        return fn
    return mark
