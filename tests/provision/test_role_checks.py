"""Each role's checks before a change are one task that names every problem it found, each with its fix, and
stops the host before anything is changed. Run here against this machine, which the checks refuse for more than
one reason at once (nothing is installed: every role fails at its check, before its first change)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT
from role_inputs import plan_inputs
from standin_smi import stand_in_nvidia_smi

BIN = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin"


def _run_role(tmp_path: Path, role: str, role_vars: str) -> str:
    """``role`` with the plan's inputs (as the preflight hands them) and ``role_vars`` over them."""
    play = tmp_path / "play.yml"
    play.write_text(textwrap.dedent(f"""\
        - name: Run {role} against the control machine
          hosts: localhost
          connection: local
          gather_facts: false
          vars: {json.dumps(plan_inputs(role))}
          roles:
            - role: pdfleet.cluster.{role}
              vars:
        """) + textwrap.indent(textwrap.dedent(role_vars), " " * 8))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(play)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert "changed=0" in proc.stdout, proc.stdout[-3000:]
    return proc.stdout


@pytest.mark.skipif(not Path("/etc/machine-id").is_file(), reason="needs /etc/machine-id (the control machine check)")
def test_driver_checks_name_every_problem_at_once(tmp_path: Path) -> None:
    out = _run_role(tmp_path, "nvidia_driver", """\
        nvidia_driver_version: "570.1.2"
        nvidia_driver_branch: 580
        nvidia_driver_check_gpus: false
        """)
    # one failure that names all three problems
    failure = next(line for line in out.splitlines() if "is not a version of branch" in line)
    assert "localhost: driver 570.1.2 is not a version of branch 580; fix pdfleet_cluster.cuda" in failure
    assert "localhost: nvidia_driver_cuda_repo_url is not set." in failure
    assert "localhost is the control machine running this playbook" in failure


def test_toolkit_checks_name_a_malformed_release_and_the_missing_repository(tmp_path: Path) -> None:
    """The floor is the planner's rule (tests/plan); the role checks that its input is a major.minor release."""
    out = _run_role(tmp_path, "cuda_toolkit", """\
        cuda_toolkit_version: "13"
        """)
    failure = next(line for line in out.splitlines() if "is not a major.minor" in line)
    assert "localhost: cuda_toolkit_version 13 is not a major.minor release (e.g. 13.0)" in failure
    assert "localhost: /etc/apt/sources.list.d/pdfleet-cuda.sources is missing" in failure


def test_sglang_checks_name_a_missing_sim_wheel(tmp_path: Path) -> None:
    """The patch id is the planner's rule (the plan hands the role the version's patch); the role checks that sim
    mode has the wheels it installs (pdfleet and pdfleet-sim), each with its path and sha256."""
    out = _run_role(tmp_path, "sglang", """\
        sglang_install_mode: sim
        """)
    failure = next(line for line in out.splitlines() if "needs sglang_sim_wheels" in line)
    assert "localhost: sglang_install_mode=sim needs sglang_sim_wheels" in failure
    good = {"path": "/tmp/pdfleet-0.1.0-py3-none-any.whl", "sha256": "a" * 64}
    out = _run_role(tmp_path, "sglang", f"""\
        sglang_install_mode: sim
        sglang_sim_wheels: [{json.dumps(good)}, {{"path": "/tmp/pdfleet_sim-0.1.0-py3-none-any.whl", "sha256": "b1"}}]
        """)
    assert "localhost: sglang_install_mode=sim needs sglang_sim_wheels" in out, "a short sha256 must be refused"


def test_a_role_without_the_plans_inputs_is_refused_naming_them(tmp_path: Path) -> None:
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  connection: local\n  gather_facts: false\n"
                    "  roles: [pdfleet.cluster.sglang]\n")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(play)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0 and "changed=0" in proc.stdout, proc.stdout[-3000:]
    out = proc.stdout + proc.stderr
    assert "missing required arguments" in out and "sglang_patch" in out and "sglang_record_path" in out, out


def test_nixl_checks_gpu_peer_access_before_any_change(tmp_path: Path) -> None:
    smi = stand_in_nvidia_smi(tmp_path / "hw", p2p_pairs={"1-5": "NS"})  # one prefill/decode pair without P2P
    out = _run_role(tmp_path, "nixl", f"""\
        nixl_venv: {tmp_path / "venv"}
        nixl_prefill_gpus: [0, 1]
        nixl_decode_gpus: [4, 5]
        nixl_nvidia_smi: {smi}
        """)
    failure = next(line for line in out.splitlines() if "prefill/decode GPU pairs" in line)
    for word in ("read", "write"):
        expected = (f"localhost: peer {word} (`nvidia-smi topo -p2p {word[0]}`) is not OK for 2 of the 8 "
                    "prefill/decode GPU pairs (prefill GPU0,GPU1, decode GPU4,GPU5): "
                    "NS (Not supported): GPU1->GPU5, GPU5->GPU1;")
        assert expected in failure
    assert "turn off PCIe ACS" in failure and "Nothing was changed on this host." in failure
    assert not (tmp_path / "venv").exists()
