"""The incident on the shared converged sim (tests/conftest.py), deployed by site.yml: the pinned SGLang unpatched
(the explicit inventory switch pdfleet_cluster.sglang.apply_patch: false) wedges after one abort cascade — the
prefill bootstrap thread dies, /health stays 200, new requests hang — and site.yml's verification play fails
naming the checks; patched, the same cascade leaves it serving and the play passes. The wedge test is marked
``mutates`` (it runs last and converges the patched stack again)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import urllib.error
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT
from simcluster import BIN, SITE, ScratchCluster

pytestmark = [pytest.mark.sim, pytest.mark.slow]

PORTS = {"prefill": 30000, "decode": 30001, "router": 8000}
DEATH = "First message should be b'NixlMsgGuard'"


def _journal(cluster: ScratchCluster, unit: str) -> str:
    return cluster.ssh(f"journalctl -u {unit} -o cat --no-pager", timeout=60).stdout


@pytest.mark.mutates
def test_unpatched_wedges_verification_fails_and_patched_survives(converged: ScratchCluster) -> None:
    """Unpatched: site.yml's verification fails on the wedge; the verify stage run alone (`--tags verify`, no
    restart) fails again and names the thread death that predates its run, with its time (issue 11). Patched
    again (what puts the shared sim back): the same cascade leaves it serving and the verification passes."""
    try:
        with converged.model_changed("sglang", apply_patch=False):
            proc = converged.playbook(check=False)
            record = json.loads(converged.ssh("cat /opt/pdfleet/venv/pdfleet-record.json").stdout)
            assert record["patched"] is False
            # The verification play ran the cascade and failed, naming the checks.
            assert proc.returncode != 0
            assert "verification FAIL" in proc.stdout
            report = converged.latest_report()
            failed = {f["check"] for f in report["failures"]}
            assert {"recovery", "logs"} <= failed, report["failures"]
            assert "recovery" in proc.stdout and "logs" in proc.stdout
            # The wedge itself: the thread died (in the journal), health still says 200, a new request hangs.
            assert DEATH in _journal(converged, "pdfleet-prefill0")
            for role, port in PORTS.items():
                assert converged.health(f"http://{converged.address}:{port}") == 200, role
            with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
                converged.chat("In one sentence, what is PCIe? (after the cascade)", timeout=15)

            # Verifying the still-wedged cluster again, with the verify stage's tag alone.
            again = converged.playbook(SITE, "--tags", "verify", check=False)
            assert again.returncode != 0 and "verification FAIL" in again.stdout, again.stdout[-4000:]
            logs = next(c for c in converged.latest_report()["checks"] if c["name"] == "logs")
            assert logs["status"] == "fail" and "BEFORE the protocol" in logs["summary"], logs
            assert logs["measured"]["thread_death_before_protocol"] >= 1
            assert re.search(r"pdfleet-prefill0 at \d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}", logs["summary"]), \
                logs["summary"]
    finally:
        patched = converged.playbook(check=False)  # the inventory is patched again: converge and verify
    assert patched.returncode == 0, patched.stdout[-6000:]
    report = converged.latest_report()
    assert report["ok"] is True and report["verdict"] == "pass"
    assert DEATH not in _journal(converged, "pdfleet-prefill0").split("Started pdfleet-prefill0")[-1]
    out = converged.chat("In one sentence, what is PCIe? (patched, after the cascade)")
    assert out["usage"]["completion_tokens"] > 0


def _verify(cluster: ScratchCluster, report: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc = subprocess.run([str(BIN / "pdfleet"), "verify", "-i", str(cluster.inventory), "--cycles", "1",
                           "--skip", "bench", "--skip", "logs", "--report", str(report), *extra],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, check=False)
    return proc, json.loads(report.read_text())


def test_leaving_the_logs_out_is_incomplete_unless_allowed(converged: ScratchCluster, tmp_path: Path) -> None:
    """Issue 11: on the patched sim, `pdfleet verify --skip logs` exits 2 (INCOMPLETE); with --allow-incomplete
    it exits 0 and the report names the evidence that is missing."""
    skip, skipped = _verify(converged, tmp_path / "skip.json")
    assert skip.returncode == 2 and skipped["verdict"] == "incomplete", skip.stdout[-3000:] + skip.stderr[-2000:]
    assert "INCOMPLETE" in skip.stdout
    assert any(m.startswith("logs:") for m in skipped["missing_evidence"]), skipped["missing_evidence"]
    allow, allowed = _verify(converged, tmp_path / "allow.json", "--allow-incomplete")
    assert allow.returncode == 0 and allowed["incomplete_allowed"] is True, allow.stdout[-3000:] + allow.stderr[-2000:]
    assert any("--allow-incomplete" in n and "logs" in n for n in allowed["notes"]), allowed["notes"]
