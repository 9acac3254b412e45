"""Watchdog acceptance on the shared converged one-host sim (tests/conftest.py; both tests are marked ``mutates``
and converge site.yml again at the end) deployed by site.yml's plays (the watchdog and
Prometheus on the router host): on the pristine stack (apply_patch: false) one unknown frame to each prefill
bootstrap socket wedges the pair; the watchdog must name it WEDGED within 2 x canary deadline + one interval,
Prometheus must fire PdfleetPairWedged, and with remediation restart the pair must serve again unattended. On
the patched stack the same frame and a verification run (abort cascade + benchmark) must cause no transition
and no remediation. Prints time to detect and time to recover."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from pdfleet.versions import LEASE_DIR
from pdfleet_sim.testing import realwedge
from simcluster import SITE, ScratchCluster, wait_for

pytestmark = [pytest.mark.sim, pytest.mark.slow, pytest.mark.long]

HERE = Path(__file__).parent
WATCHDOG_SITE = HERE / "watchdog_site.yml"
VERIFY_ONLY = HERE / "verify_only.yml"
BOOTSTRAP_PORT = 8998
DEADLINE_S, INTERVAL_S, FAILURES = 20.0, 15.0, 2  # the role's defaults
BUDGET_S = FAILURES * DEADLINE_S + INTERVAL_S


def status(cluster: ScratchCluster) -> dict[str, Any]:
    proc = cluster.ssh("pdfleet-watchdog status --json", timeout=60)
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def foreign_frame(address: str, port: int = BOOTSTRAP_PORT) -> float:
    """One unknown leading frame to every prefill rank's bootstrap socket (as registered on its bootstrap
    server at address:port); the epoch it was sent."""
    sent = time.time()
    for rank in range(len(realwedge.rank_sockets(address, port))):
        realwedge.foreign_frame(address, port, rank)
    return sent


def firing(cluster: ScratchCluster, alert: str) -> bool:
    with urllib.request.urlopen(f"http://{cluster.address}:9090/api/v1/alerts", timeout=10) as r:
        alerts = json.loads(r.read())["data"]["alerts"]
    return any(a["labels"].get("alertname") == alert and a["state"] == "firing" for a in alerts)


def transition_at(doc: dict[str, Any], to: str, after: float) -> float | None:
    return next((t["at"] for t in doc["transitions"] if t["to"] == to and t["at"] >= after), None)


def packages(c: ScratchCluster) -> set[str]:
    proc = c.ssh("dpkg-query -W -f '${Package}\\n'", timeout=60)
    assert proc.returncode == 0, proc.stderr
    return set(proc.stdout.split())


def purge_added(c: ScratchCluster, before: set[str]) -> None:
    """Restart mode installs polkitd (and what it pulls in); back in alert mode the role leaves system packages
    installed (another service may use them): the test takes out exactly what it added, so the shared sim is back."""
    added = sorted(packages(c) - before)
    if added:
        proc = c.ssh(f"DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq {' '.join(added)}", timeout=300)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.mutates
def test_watchdog_on_the_sim(converged: ScratchCluster) -> None:
    c = converged
    before = packages(c)
    try:
        with c.model_changed("sglang", apply_patch=False):
            _watchdog_on_the_pristine_stack(c)
    finally:
        c.playbook(SITE, "--skip-tags", "verify")  # patched again, the watchdog in alert mode: the shared sim back
        purge_added(c, before)
        c.wait_ready()


def _watchdog_on_the_pristine_stack(c: ScratchCluster) -> None:
    c.playbook(WATCHDOG_SITE)
    c.wait_ready()
    host = "node1"
    wait_for("every pair OK", lambda: status(c)["ok"], 180)

    # 1. pristine, alert mode: detect, and the alert fires in Prometheus
    sent = foreign_frame(c.address)
    doc = wait_for("WEDGED", lambda: (d := status(c))["pairs"][host]["state"] == "WEDGED" and d, 3 * BUDGET_S)
    detect = transition_at(doc, "WEDGED", sent) - sent
    print(f"\n[pristine, alert] WEDGED {detect:.1f} s after the frame (budget {BUDGET_S:g} s)")
    assert detect <= BUDGET_S, doc["transitions"]
    t = time.time()
    wait_for("PdfleetPairWedged firing", lambda: firing(c, "PdfleetPairWedged"), 120, 2.0)
    print(f"[pristine, alert] PdfleetPairWedged firing in Prometheus {time.time() - sent:.1f} s after the frame "
          f"({time.time() - t:.1f} s after WEDGED was seen)")
    wait_for("PdfleetHealthLies firing", lambda: firing(c, "PdfleetHealthLies"), 120, 2.0)
    assert status(c)["remediation"]["remediations"] == []  # alert mode acts on nothing

    # 2. switch to restart: the still-wedged pair is healed unattended
    c.playbook(WATCHDOG_SITE, "-e", "pdfleet_watchdog_remediation=restart")
    switched = time.time()
    doc = wait_for("OK after the restart", lambda: (d := status(c))["pairs"][host]["state"] == "OK"
                   and d["remediation"]["remediations"] and d, 600, 2.0)
    print(f"[pristine, restart] serving again {time.time() - switched:.1f} s after the watchdog switched to "
          "restart (it started fresh: WEDGED after its own canaries, then restart, gate, re-add)")
    assert c.chat("In one sentence, what is PCIe? (after the watchdog's restart)")["usage"]["completion_tokens"] > 0

    # 3. pristine, restart mode: a new wedge is detected and healed
    sent = foreign_frame(c.address)
    doc = wait_for("WEDGED then OK", lambda: (d := status(c)) and transition_at(d, "WEDGED", sent)
                   and transition_at(d, "OK", transition_at(d, "WEDGED", sent) or sent) and d, 600, 2.0)
    wedged_at = transition_at(doc, "WEDGED", sent)
    ok_at = transition_at(doc, "OK", wedged_at)
    print(f"[pristine, restart] time to detect {wedged_at - sent:.1f} s; time to recover {ok_at - sent:.1f} s "
          f"after the frame ({ok_at - wedged_at:.1f} s of remediation)")
    assert wedged_at - sent <= BUDGET_S
    restarts = [r for r in doc["remediation"]["remediations"] if r["action"] == "restart" and r["result"] == "ok"]
    assert sum(r["count"] for r in restarts) == 2, doc["remediation"]
    assert c.chat("In one sentence, what is PCIe? (second recovery)")["usage"]["completion_tokens"] > 0

    # 4. the watchdog killed mid-remediation (a deploy restarting it, the OOM killer): the pair is out of the router
    # under the watchdog's lease; systemd starts a new process, which takes its own lease again, finishes the
    # remediation from its recorded intent and releases the lease: the pair serves, nothing is left held
    _killed_mid_remediation(c, host)


def _lease(c: ScratchCluster, pair: str) -> dict[str, Any] | None:
    proc = c.ssh(f"cat {LEASE_DIR}/{pair}.json 2>/dev/null || true", timeout=20)
    return json.loads(proc.stdout) if proc.stdout.strip() else None


def _killed_mid_remediation(c: ScratchCluster, host: str) -> None:
    before = c.ssh("systemctl show -p MainPID --value pdfleet-watchdog").stdout.strip()
    sent = foreign_frame(c.address)
    held = wait_for("the watchdog's lease (remediation under way)",
                    lambda: (x := _lease(c, host)) is not None and x["kind"] == "watchdog" and x, 3 * BUDGET_S, 0.5)
    killed = time.time()
    kill = c.ssh("systemctl kill --signal=KILL pdfleet-watchdog.service")
    assert kill.returncode == 0, kill.stderr
    print(f"[pristine, restart] watchdog (pid {before}) killed {killed - sent:.1f} s after the frame, holding "
          f"{held['who']}'s lease for {held['purpose']}")
    wait_for("a new watchdog process", lambda: c.ssh("systemctl show -p MainPID --value pdfleet-watchdog")
             .stdout.strip() not in ("", "0", before), 60, 1.0)
    doc = wait_for("OK again, lease released", lambda: (d := status(c))["pairs"][host]["state"] == "OK"
                   and _lease(c, host) is None and d, 600, 2.0)
    print(f"[pristine, restart] the restarted watchdog finished the remediation: OK and the lease released "
          f"{time.time() - killed:.1f} s after the kill")
    assert c.chat("In one sentence, what is PCIe? (after the watchdog was killed)")["usage"]["completion_tokens"] > 0
    assert doc["remediation"].get("intent") in (None, {}) and doc["remediation"]["left_out"] == [], doc["remediation"]


@pytest.mark.mutates
def test_no_false_alarm_on_the_patched_stack(converged: ScratchCluster) -> None:
    """Patched: a foreign frame and a verification run with 10 x 250 abort cascades and the benchmark load: no
    transition, no remediation."""
    c = converged
    before = packages(c)
    try:
        _no_false_alarm(c)
    finally:
        c.playbook(SITE, "--skip-tags", "verify")  # the watchdog back in alert mode: the shared sim back
        purge_added(c, before)
        c.wait_ready()


def _no_false_alarm(c: ScratchCluster) -> None:
    host = "node1"
    c.playbook(WATCHDOG_SITE, "-e", "pdfleet_watchdog_remediation=restart")
    c.wait_ready()
    c.ssh("systemctl restart pdfleet-watchdog")  # a fresh history for the patched stack
    wait_for("every pair OK (patched)", lambda: (d := status(c))["ok"] and d["pairs"][host]["transitions"] == 0
                                                and d, 180)
    mark = time.time()
    foreign_frame(c.address)
    # the protocol: deep liveness, 10 abort cascades of 250 sessions, recovery, the benchmark (the frame above is
    # ours: allowed)
    c.playbook(VERIFY_ONLY, "-e", json.dumps({"pdfleet_verify_args": ["--cycles", "10", "--concurrency", "250",
                                                                      "--allow-dropped-frames"]}))
    time.sleep(2 * INTERVAL_S)
    doc = status(c)
    moved = [t for t in doc["transitions"] if t["at"] >= mark]
    print(f"[patched] {time.time() - mark:.0f} s with a foreign frame and a 10 x 250 verification run: "
          f"{len(moved)} transitions, {len(doc['remediation']['remediations'])} remediations")
    assert moved == [] and doc["pairs"][host]["state"] == "OK", moved
    assert doc["remediation"]["remediations"] == []
