"""A converge leaves the host as the plan says, no more and no less (issue 15), on one scratch sim cluster.

In file order, from pd-4p4d with prefill0, prefill1, decode0 and decodeB: check mode lists a removal and
changes nothing; an instance is renamed (decode0 -> decodeA, same GPUs and port); a second run changes
nothing; two instances are removed (prefill1, decodeB), each drained out of the router first; the profile
switches to mono-tp8 and back to pd-4p4d. After each site.yml only the planned pdfleet units exist and run,
and the verification play passed. Two hand-made units stay throughout: one outside the pdfleet-* convention
and one inside it without pdfleet's marker, which every run reports and conformance fails on. The watchdog
(site.yml installs it beside the router) is pdfleet's: it stays, runs and is not reported.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from simcluster import SITE, ScratchCluster, recap

from .conftest import DECODE0, DECODEB, PREFILL0, PREFILL1, set_instances

# long, extra depth: the default suite's fleet scenario (tests/scenario, step e) renames an instance on the sim
# fleet and checks the old unit removed and the verification passed.
pytestmark = [pytest.mark.sim, pytest.mark.slow, pytest.mark.long]

FOREIGN_OUTSIDE = "handmade-echo"  # outside the convention: never looked at
FOREIGN_INSIDE = "pdfleet-handmade"  # inside it, no X-Pdfleet-* marker: left alone and reported
HAND_MADE_UNIT = "[Unit]\nDescription=made by hand, not by pdfleet\n[Service]\nExecStart=/bin/sleep infinity\n" \
                 "[Install]\nWantedBy=multi-user.target\n"
WARNING = (f"node1: /etc/systemd/system/{FOREIGN_INSIDE}.service is named like a pdfleet unit but pdfleet did not "
           "create it")
DECODEA = dict(DECODE0, name="decodeA")
WATCHDOG = "pdfleet-watchdog"  # beside the router (X-Pdfleet-Beside): planned wherever the router is
FOUR_UNITS = {"pdfleet-prefill0", "pdfleet-prefill1", "pdfleet-decode0", "pdfleet-decodeB", "pdfleet-router"}
DURATIONS: dict[str, float] = {}


def _files(c: ScratchCluster) -> set[str]:
    out = c.ssh("cd /etc/systemd/system && ls -1d pdfleet-*.service handmade-*.service 2>/dev/null").stdout
    return {line.removesuffix(".service") for line in out.split()}


def _active(c: ScratchCluster) -> set[str]:
    """Running pdfleet-* and handmade-* services, except packaged ones (the sim's stand-in hardware units under
    /lib, e.g. pdfleet-sim-nvidia-module): those are no plan's business."""
    out = c.ssh("for u in $(systemctl list-units --type=service --state=active --plain --no-legend "
                "'pdfleet-*' 'handmade-*' | cut -d' ' -f1); do "
                "echo \"$u $(systemctl show -p FragmentPath --value \"$u\")\"; done").stdout
    running = [line.split() for line in out.splitlines() if line.strip()]
    return {w[0].removesuffix(".service") for w in running if len(w) < 2 or not w[1].startswith(("/lib/", "/usr/"))}


def _converge(c: ScratchCluster, label: str, *extra: str, check: bool = True) -> Any:
    t0 = time.monotonic()
    proc = c.playbook(SITE, *extra, check=check)
    DURATIONS[label] = time.monotonic() - t0
    print(f"\n[prune] {label}: {DURATIONS[label]:.0f} s")
    return proc


def _assert_only(c: ScratchCluster, planned: set[str]) -> None:
    expected = planned | {FOREIGN_INSIDE, FOREIGN_OUTSIDE} | ({WATCHDOG} if "pdfleet-router" in planned else set())
    assert _files(c) == expected, f"unit files {_files(c)} != planned + hand-made {expected}"
    assert _active(c) == expected, f"running units {_active(c)} != planned + hand-made {expected}"
    envs = set(c.ssh("cd /etc/pdfleet && ls -1 pdfleet-*.env").stdout.split())
    assert envs == {f"{u}.env" for u in planned}, envs


def _assert_verified(c: ScratchCluster) -> None:
    report = c.latest_report()
    assert report["ok"], report.get("failures")
    c.wait_ready()
    assert c.chat("In one sentence, what is PCIe?")["usage"]["completion_tokens"] > 0


@pytest.fixture(scope="module")
def hand_made(prune_cluster: ScratchCluster) -> ScratchCluster:
    """The converged cluster with the two hand-made units installed and running."""
    for name in (FOREIGN_OUTSIDE, FOREIGN_INSIDE):
        put = prune_cluster.ssh(f"printf '%s' '{HAND_MADE_UNIT}' > /etc/systemd/system/{name}.service && "
                                f"systemctl daemon-reload && systemctl enable --now {name}.service")
        assert put.returncode == 0, put.stderr
    return prune_cluster


def test_check_mode_lists_the_removal_and_changes_nothing(hand_made: ScratchCluster) -> None:
    c = hand_made
    _assert_only(c, FOUR_UNITS)
    set_instances(c, "pd-4p4d", [PREFILL0, PREFILL1, DECODEA, DECODEB])
    proc = _converge(c, "check mode, rename", "--check", "--diff")
    assert "node1: removing pdfleet-decode0" in proc.stdout, proc.stdout[-4000:]
    assert WARNING in proc.stdout + proc.stderr
    assert f"/etc/systemd/system/{WATCHDOG}.service is named like" not in proc.stdout + proc.stderr
    _assert_only(c, FOUR_UNITS)


def test_rename_removes_the_old_unit(hand_made: ScratchCluster) -> None:
    c = hand_made
    set_instances(c, "pd-4p4d", [PREFILL0, PREFILL1, DECODEA, DECODEB])
    proc = _converge(c, "rename decode0 -> decodeA")
    assert "node1: removing pdfleet-decode0" in proc.stdout
    assert WARNING in proc.stdout + proc.stderr
    _assert_only(c, FOUR_UNITS - {"pdfleet-decode0"} | {"pdfleet-decodeA"})
    _assert_verified(c)


def test_second_run_changes_nothing(hand_made: ScratchCluster) -> None:
    proc = _converge(hand_made, "second run")
    assert recap(proc.stdout, "node1")["changed"] == 0, proc.stdout[-4000:]
    assert "removing" not in proc.stdout
    assert WARNING in proc.stdout + proc.stderr  # still reported, still left alone


def test_remove_instances(hand_made: ScratchCluster) -> None:
    c = hand_made
    set_instances(c, "pd-4p4d", [PREFILL0, DECODEA])
    proc = _converge(c, "remove prefill1 and decodeB")
    assert "node1: removing pdfleet-decodeB, pdfleet-prefill1" in proc.stdout, proc.stdout[-6000:]
    for url, role in ((f"http://{c.address}:30002", "decode"), (f"http://{c.address}:30003", "prefill")):
        # drained before it stopped: out of the router, then idle by its own numbers
        assert f"node1: {url} ({role}): left the router; idle after" in proc.stdout, proc.stdout[-6000:]
    _assert_only(c, {"pdfleet-prefill0", "pdfleet-decodeA", "pdfleet-router"})
    _assert_verified(c)


def test_switch_to_mono_and_back(hand_made: ScratchCluster) -> None:
    c = hand_made
    mono = [{"name": "mono0", "role": "mono", "host": "node1", "gpus": list(range(8)), "tp": 8, "port": 30000,
             "nccl_port": 30100}]
    set_instances(c, "mono-tp8", mono)
    proc = _converge(c, "pd-4p4d -> mono-tp8")
    assert "node1: removing pdfleet-decodeA, pdfleet-prefill0" in proc.stdout, proc.stdout[-6000:]
    _assert_only(c, {"pdfleet-mono0", "pdfleet-router"})
    _assert_verified(c)
    original = [dict(PREFILL0, gpus=[0, 1, 2, 3], tp=4), dict(DECODE0, gpus=[4, 5, 6, 7], tp=4)]
    set_instances(c, "pd-4p4d", copy.deepcopy(original))
    proc = _converge(c, "mono-tp8 -> pd-4p4d")
    assert "node1: removing pdfleet-mono0" in proc.stdout
    _assert_only(c, {"pdfleet-prefill0", "pdfleet-decode0", "pdfleet-router"})
    _assert_verified(c)


def test_conformance_fails_on_a_running_unplanned_pdfleet_unit(hand_made: ScratchCluster) -> None:
    c = hand_made
    t0 = time.monotonic()
    failed = c.conformance()
    assert failed.returncode == 1, failed.stdout[-3000:]
    assert (f"node1: {FOREIGN_INSIDE}.service is running but the plan does not name it for this host (pdfleet did "
            "not create it") in failed.stdout, failed.stdout[-3000:]
    c.ssh(f"systemctl disable --now {FOREIGN_INSIDE}.service")
    passed = c.conformance()
    DURATIONS["conformance x2"] = time.monotonic() - t0
    assert passed.returncode == 0, passed.stdout[-3000:]
    print("\n[prune] durations: " + ", ".join(f"{k} {v:.0f} s" for k, v in DURATIONS.items()))
