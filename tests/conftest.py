"""The one converged one-host sim of the default suite, and the rule for the tests that change it.

Fixture ``converged`` (session scope): a scratch copy of inventory/sim on its own subnet (tests/simcluster.py),
converged by the real site.yml with ``pdfleet_cluster.sglang.apply_patch: true`` and its verification play
passed. Every suite that needs a converged one-host sim (tests/sim, tests/provision with the conformance suite it
runs over SSH, the secrets test, ...) asks for this fixture, so one pytest run converges it once; it is torn down
(hosts, bridge, nft rules, the stand-in repository's server) when the session ends, also after a failure.
``pytest tests/sim`` or ``pytest tests/provision`` alone gets it too (pytest loads this file for any path under
tests/).

Marker ``mutates``: a test that changes the shared sim (a hand edit, a driver pin, a reboot, the unpatched
stack, ...) carries ``@pytest.mark.mutates``. Such tests

- run after every test that does not carry it (``pytest_collection_modifyitems`` below moves them to the end,
  keeping their order; a read-only test can therefore trust the cluster as the fixture left it), and
- must put back what they changed (try/finally: the scratch inventory included, see
  ``ScratchCluster.model_changed``). After each one the host is compared with its state right after the converge
  (``host_state``); a difference fails that test naming it, and the cluster is converged again so the tests after
  it still start from the converged state. When the session ends, a converge of site.yml must change nothing.
"""

from __future__ import annotations

import difflib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from simcluster import SITE, ScratchCluster, recap, scratch_cluster, skip_reason, wait_for

MUTATES = "mutates"
CONVERGE_S = pytest.StashKey[float]()
BASELINE = pytest.StashKey[str]()
BASELINE_MODEL = pytest.StashKey[bytes]()
MUTATED = pytest.StashKey[bool]()
BROKEN = pytest.StashKey[str]()
# How long units restarted by a test (or a reboot) may take to be active and the router ready again.
SETTLE_S = 180

# What a converge owns on the one host, read in one SSH round trip: contents and modes of the files the roles
# write, the package selections (holds included), the loaded driver, the patched conn.py, the model files and
# which units run. Not PIDs, journals, reports or counters: a test may restart units, the converge may not.
_HOST_STATE = r"""
set -u
conn=$(python3 -c "import json; print(json.load(open('/opt/pdfleet/venv/pdfleet-record.json'))['file'])")
files="/opt/pdfleet/venv/pdfleet-record.json $conn /etc/pdfleet-sim/hardware.json /etc/systemd/system/pdfleet-*
 /etc/prometheus/pdfleet-alerts.yml /etc/pdfleet-watchdog/plan.json /opt/pdfleet-watchdog/venv/pdfleet-wheel.sha256
 /opt/pdfleet-watchdog/venv/lib/python3*/site-packages/pdfleet/watchdog/__init__.py /etc/apt/preferences.d/*
 /etc/apt/sources.list.d/* /etc/modprobe.d/*"
sha256sum $files
stat -c '%n %a %U %G' $files
find /srv/models -type f -exec sha256sum {} + | sort
dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev} ${db:Status-Want}\n'
echo "loaded driver $(cat /run/pdfleet-sim/nvidia/version)"
systemctl list-units --all --plain --no-legend --no-pager 'pdfleet-*' prometheus.service | awk '{print $1, $3, $4}'
"""


def _model_path(cluster: ScratchCluster) -> Path:
    return cluster.inventory / "group_vars" / "all" / "cluster.yml"


def host_state(cluster: ScratchCluster) -> str:
    """What a converge decides on the host, plus the scratch inventory's model (see _HOST_STATE)."""
    try:
        proc = cluster.ssh(_HOST_STATE, timeout=120)
        host = proc.stdout if proc.returncode == 0 else f"node1: reading the host state failed: {proc.stderr[-2000:]}"
    except subprocess.TimeoutExpired:
        host = "node1: reading the host state timed out (120 s)"
    model = _model_path(cluster).read_text()
    return f"{host}--- scratch inventory group_vars/all/cluster.yml ---\n{model}"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test marked ``mutates`` after every other test; both groups keep their collection order."""
    items[:] = ([i for i in items if i.get_closest_marker(MUTATES) is None]
                + [i for i in items if i.get_closest_marker(MUTATES) is not None])


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if CONVERGE_S in config.stash:
        terminalreporter.write_line(f"pdfleet: the shared one-host sim (fixture converged) converged once, in "
                                    f"{config.stash[CONVERGE_S]:.0f} s (site.yml with its verification)")


@pytest.fixture(scope="session")
def converged(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[ScratchCluster]:
    """The scratch one-host sim converged by site.yml with the patch applied (its verification play passed);
    shared by the whole session. See the module docstring for the ``mutates`` rule."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with scratch_cluster(tmp_path_factory.mktemp("converged")) as cluster:
        t0 = time.monotonic()
        cluster.set_model("sglang", apply_patch=True)
        cluster.first_converge_stdout = cluster.playbook().stdout
        cluster.wait_ready()
        pytestconfig.stash[CONVERGE_S] = time.monotonic() - t0
        print(f"\nshared one-host sim converged in {pytestconfig.stash[CONVERGE_S]:.0f} s", file=sys.stderr)
        pytestconfig.stash[BASELINE] = host_state(cluster)
        pytestconfig.stash[BASELINE_MODEL] = _model_path(cluster).read_bytes()
        yield cluster
        if pytestconfig.stash.get(MUTATED, False) and BROKEN not in pytestconfig.stash:
            # The tests that changed the cluster put it back: one more converge is a no-op.
            proc = cluster.playbook(SITE, "--skip-tags", "verify")
            for host in ("node1", "localhost"):
                assert recap(proc.stdout, host)["changed"] == 0, (
                    f"{host}: site.yml changed something after the tests marked {MUTATES} ran: one of them did not "
                    f"put back what it changed\n{proc.stdout[-4000:]}")


def _difference(before: str, after: str) -> str:
    return "\n".join(difflib.unified_diff(before.splitlines(), after.splitlines(), "after the converge",
                                          "after the test", lineterm="", n=0))


@pytest.fixture(autouse=True)
def _shared_sim_put_back(request: pytest.FixtureRequest) -> Iterator[None]:
    """Around each test that uses ``converged``: refuse to run on a cluster a mutating test left broken; after a
    test marked ``mutates``, require the host state of right after the converge (polled while restarted units
    settle), else converge again and fail the test naming the difference."""
    if "converged" not in request.fixturenames:
        yield
        return
    config = request.config
    if BROKEN in config.stash:
        pytest.fail(f"the shared sim is broken: {config.stash[BROKEN]}")
    if request.node.get_closest_marker(MUTATES) is None:
        yield
        return
    cluster: ScratchCluster = request.getfixturevalue("converged")
    config.stash[MUTATED] = True
    yield
    baseline = config.stash[BASELINE]
    try:
        wait_for("the host state of right after the converge", lambda: host_state(cluster) == baseline, SETTLE_S, 5)
    except AssertionError:
        difference = _difference(baseline, host_state(cluster))
    else:
        try:
            cluster.wait_ready(SETTLE_S)
            return
        except AssertionError as exc:
            difference = f"the router is not ready again: {exc}"
    # The inventory and a converge again, so that the tests after this one start from the converged state.
    _model_path(cluster).write_bytes(config.stash[BASELINE_MODEL])
    try:
        cluster.playbook(SITE, "--skip-tags", "verify")
        cluster.wait_ready(SETTLE_S)
        repaired = host_state(cluster) == baseline
    except AssertionError as exc:
        repaired, difference = False, f"{difference}\nconverging again failed too: {str(exc)[-2000:]}"
    if not repaired:
        config.stash[BROKEN] = f"{request.node.nodeid} did not put back what it changed, and a converge did not either"
    pytest.fail(f"node1: {request.node.nodeid} (marked {MUTATES}) did not put the shared sim back "
                f"({'converged again for the next tests' if repaired else 'a converge did not fix it'}); "
                f"difference from right after the converge:\n{difference}", pytrace=False)
