"""ansible/playbooks/verify.yml end to end on this machine, against a LocalPD on 127.0.0.1.

The inventory is written on the fly: one host (local connection) whose planned ports are the LocalPD's.
The units are not systemd units here, so their journals are empty: the traffic checks pass and the logs
check, which refuses an empty log as proof of anything, is inconclusive. That proves the wiring: the start is recorded,
the protocol runs with --defer-logs, journals land under <reports>/verify-<ts>-journal/<host>/<unit>.log,
the verdict is computed with --journal-dir, and the play fails naming the check and its values.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pdfleet_sim.testing.localpd import REPO_ROOT, LocalPD, RouterSpec, free_port

from .conftest import SGLANG_VERSION, local_pd, runtime_env

pytestmark = [pytest.mark.sglang, pytest.mark.slow]


def write_inventory(pd: LocalPD, inv: Path) -> None:
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "hosts.yml").write_text(textwrap.dedent(f"""\
        all:
          hosts:
            node1: {{ansible_host: 127.0.0.1, ansible_connection: local, ansible_python_interpreter: {sys.executable}}}
        """))
    (inv / "group_vars" / "all" / "cluster.yml").write_text(textwrap.dedent(f"""\
        pdfleet_cluster:
          profile: pd-4p4d
          hosts: {{node1: {{gpu_count: 8}}}}
          instances:
            - {{name: prefill0, role: prefill, host: node1, gpus: [0, 1, 2, 3], tp: 4, port: {pd.prefill_port},
               nccl_port: {free_port()}, bootstrap_port: {pd.bootstrap_port}}}
            - {{name: decode0, role: decode, host: node1, gpus: [4, 5, 6, 7], tp: 4, port: {pd.decode_port},
               nccl_port: {free_port()}}}
          router: {{host: node1, port: {pd.router_port}}}
          model: {{name: {pd.model}, path: /models/{pd.model}, source: standin}}
          sglang: {{version: "{SGLANG_VERSION}", patch: nixl-abort-v2, launcher: sim}}
        """))


def test_verify_playbook(runtime, router: RouterSpec, tmp_path: Path) -> None:
    with local_pd([str(runtime.python)], runtime_env(runtime, patched=True), router, tmp_path / "pd") as pd:
        inv = tmp_path / "inv"
        write_inventory(pd, inv)
        playbook = tmp_path / "site.yml"
        playbook.write_text(
            f"- name: Preflight\n  ansible.builtin.import_playbook: {REPO_ROOT}/ansible/playbooks/preflight.yml\n"
            f"- name: Verify\n  ansible.builtin.import_playbook: {REPO_ROOT}/ansible/playbooks/verify.yml\n")
        reports = tmp_path / "reports"
        extra = {"ansible_become": False, "pdfleet_verify_reports_dir": str(reports),
                 "pdfleet_verify_args": ["--cycles", "1", "--concurrency", "20", "--window", "3", "--settle", "1",
                                         "--bench-requests", "4", "--bench-max-tokens", "8",
                                         "--baseline-file", str(tmp_path / "baselines.json")]}
        proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(playbook),
                               "-e", json.dumps(extra)], capture_output=True, text=True, timeout=600,
                              cwd=str(REPO_ROOT))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "verification INCONCLUSIVE" in out and "[logs inconclusive]" in out and "empty" in out, out
    [report] = reports.glob("verify-*.json")
    data = json.loads(report.read_text())
    status = {c["name"]: c["status"] for c in data["checks"]}
    assert status == {"config": "pass", "liveness": "pass", "cascade": "pass", "recovery": "pass",
                      "logs": "inconclusive", "bench": "no-baseline"}, status
    # the play hands verify the preflight's plan document (--plan), not the inventory to plan again
    assert data["exit_code"] == 2 and data["target"]["plan"]["schema"] == "pdfleet-plan/1"
    journal = report.with_name(report.stem + "-journal") / "node1"
    assert sorted(p.name for p in journal.iterdir()) == ["pdfleet-decode0.log", "pdfleet-prefill0.log"]
    assert data["checks"][4]["measured"]["source"] == "journal dumps"
