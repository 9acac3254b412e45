"""The alert rules and the dashboard use only gateway metric names (smg_*) the pinned gateway really exports: read
from a real smg in front of a simulated pair, after one request, so a rename upstream cannot silently blind an
alert."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT
from pdfleet_sim.testing.localpd import LocalPD, RouterSpec, free_port, http_json
from pdfleet_sim.testing.simclient import chat_body

pytestmark = pytest.mark.slow

FILES = REPO_ROOT / "ansible/roles/pdfleet_monitoring/files"
NAME = re.compile(r"\bsmg_[a-z_]+")


def used() -> set[str]:
    rules = (FILES / "pdfleet-alerts.yml").read_text()
    dash = json.loads((FILES / "pdfleet-dashboard.json").read_text())
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    return set(NAME.findall(rules)) | set(NAME.findall(exprs))


def test_rules_and_dashboard_use_names_the_gateway_exports(
    sim_python: str, fake_env: dict[str, str], router: RouterSpec, tmp_path: Path
) -> None:
    if router.kind != "smg":
        pytest.skip("the smg_* names are the gateway's (smg)")
    names = used()
    assert "smg_worker_health" in names, names
    metrics_port = free_port()
    with LocalPD([sim_python], tmp_path, fake_env, router, router_args=["--prometheus-port", str(metrics_port)]) as pd:
        status, _ = http_json(pd.router_url + "/v1/chat/completions", chat_body(pd.model, "hi", 4, False))
        assert status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as resp:
            text = resp.read().decode()
    exported = set(re.findall(r"^(smg_[a-z_]+)", text, re.M))
    assert names <= exported, f"not exported by {router.kind}: {sorted(names - exported)}"
