"""The nvidia_driver role installs the CUDA repository's signing key only when its fingerprint is the pinned one
(issue 30 item 6): a served key of another fingerprint is one of the problems its checks before a change name, with
both fingerprints, the key's URL and the fix. Run against this machine like tests/provision/test_role_checks.py,
with inputs the checks refuse for other reasons too (a driver version off its branch, the control machine), so the
role certainly stops at its checks; the probe, the pure decision and the fingerprints themselves are tested in
tests/ansible_plugins/test_nvidia_key_fingerprint.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pdfleet.paths import REPO_ROOT

from provision.test_role_checks import _run_role

KEYS = REPO_ROOT / "tests" / "ansible_plugins" / "keys"
OTHER = "94B2BEF66383A1890AC4A9C553D8488F3B18D937"  # key-b.asc's, as gpg printed it


@pytest.mark.skipif(not Path("/etc/machine-id").is_file(), reason="needs /etc/machine-id (the control machine check)")
def test_a_served_key_that_is_not_the_pinned_one_stops_the_role_naming_both(tmp_path: Path) -> None:
    default = yaml.safe_load((REPO_ROOT / "ansible/roles/nvidia_driver/defaults/main.yml").read_text())[
        "nvidia_driver_cuda_repo_key_fingerprint"]
    served = tmp_path / "served.asc"
    served.write_text((KEYS / "key-b.asc").read_text())
    out = _run_role(tmp_path, "nvidia_driver", f"""\
        nvidia_driver_version: "570.1.2"
        nvidia_driver_branch: 580
        nvidia_driver_check_gpus: false
        nvidia_driver_cuda_repo_url: https://mirror.example/cuda/repos/debian12/x86_64
        nvidia_driver_cuda_repo_key_url: {served.as_uri()}
        """)
    failure = next(line for line in out.splitlines() if "is not a version of branch" in line)
    assert (f"localhost: the CUDA repository's signing key served at {served.as_uri()} has the fingerprint {OTHER}, "
            f"not the pinned {default} (nvidia_driver_cuda_repo_key_fingerprint)") in failure, failure
    assert "set nvidia_driver_cuda_repo_key_fingerprint to it" in failure
    assert default == "EB693B3035CD5710E231E123A4B469963BF863CC"  # NVIDIA's key (3bf863cc.pub)
