"""The sglang role refuses a router release it ships no hash lock for (files/gateway/<package>-<version>.lock),
on the router host, and in pypi mode a SGLang release it ships no service venv lock for
(files/service/sglang-<version>.lock), as its first tasks: before the probe and before anything changes, naming the
locks it has and the command that makes one. Runs the role's own tasks on localhost in check mode, with the inputs
the preflight hands it (role_inputs)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from pdfleet.patch.manifest import supported_versions
from pdfleet.paths import REPO_ROOT
from pdfleet.versions import ROUTER_RELEASES
from role_inputs import check_play, plan_inputs

ROLE_DIR = REPO_ROOT / "ansible" / "roles" / "sglang"


def test_a_router_release_without_a_lock_is_refused_before_the_probe(tmp_path: Path) -> None:
    inputs = {**plan_inputs("sglang"), "sglang_router_venv": "/opt/pdfleet/gateway", "sglang_router_version": "9.9.9"}
    proc = check_play(tmp_path, "    - ansible.builtin.include_role:\n        name: pdfleet.cluster.sglang\n", inputs)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, out[-3000:]
    assert "localhost: the gateway's venv installs from a hash lock, and the sglang role has none for smg==9.9.9" \
        in out, out[-3000:]
    for package, release in ROUTER_RELEASES.items():  # the locks it has, named
        assert f"{package}-{release}.lock" in out, out[-3000:]
    assert "tests/lint/locks.py gateway --pin smg==9.9.9" in out, out[-3000:]
    assert "changed=0" in out and "Probe the host once" not in out, out[-3000:]


@pytest.mark.parametrize(("package", "venv"), [
    *((p, "/opt/pdfleet/gateway") for p in sorted(ROUTER_RELEASES)),
    ("smg", ""),  # a worker host: no router venv, nothing to refuse
])
def test_every_shipped_release_passes_the_check(tmp_path: Path, package: str, venv: str) -> None:
    body = (f"    - ansible.builtin.include_vars: {ROLE_DIR / 'vars' / 'main.yml'}\n"
            "    - ansible.builtin.debug:\n"
            "        msg: \"LOCKED={{ (sglang_router_venv | length == 0 or __sglang_router_lock_name in "
            "__sglang_router_locks) | to_json }}\"\n")
    extra = {**plan_inputs("sglang"), "sglang_router_package": package,
             "sglang_router_version": ROUTER_RELEASES[package], "sglang_router_venv": venv,
             "role_path": str(ROLE_DIR)}  # what Ansible sets inside the role
    proc = check_play(tmp_path, body, extra)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "LOCKED=true" in proc.stdout, proc.stdout[-2000:]


def test_a_sglang_release_without_a_service_lock_is_refused_before_the_probe(tmp_path: Path) -> None:
    inputs = {**plan_inputs("sglang"), "sglang_install_mode": "pypi", "sglang_version": "9.9.9"}
    proc = check_play(tmp_path, "    - ansible.builtin.include_role:\n        name: pdfleet.cluster.sglang\n", inputs)
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, out[-3000:]
    assert ("localhost: the service venv installs SGLang 9.9.9 and its dependencies from a hash lock, and the sglang "
            "role has none for it") in out, out[-3000:]
    for version in supported_versions():
        assert f"sglang-{version}.lock" in out, out[-3000:]
    assert "tests/lint/locks.py service --pin sglang==9.9.9" in out, out[-3000:]
    assert "changed=0" in out and "Probe the host once" not in out, out[-3000:]


@pytest.mark.parametrize(("version", "mode"), [*((v, "pypi") for v in supported_versions()), ("9.9.9", "sim")])
def test_every_sglang_release_has_its_service_lock_and_sim_mode_needs_none(tmp_path: Path, version: str,
                                                                          mode: str) -> None:
    body = (f"    - ansible.builtin.include_vars: {ROLE_DIR / 'vars' / 'main.yml'}\n"
            "    - ansible.builtin.debug:\n"
            "        msg: \"LOCKED={{ (sglang_install_mode != 'pypi' or __sglang_service_lock_name in "
            "__sglang_service_locks) | to_json }} LEN={{ __sglang_service_lock_text | length }}\"\n")
    extra = {**plan_inputs("sglang"), "sglang_install_mode": mode, "sglang_version": version,
             "role_path": str(ROLE_DIR)}
    proc = check_play(tmp_path, body, extra)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "LOCKED=true" in proc.stdout, proc.stdout[-2000:]
    assert ("LEN=0" in proc.stdout) == (mode == "sim"), proc.stdout[-2000:]


@pytest.mark.parametrize("mode", ["pypi", "sim"])
def test_the_service_lock_entry_point_hands_the_lock_of_the_planned_release_on(tmp_path: Path, mode: str) -> None:
    """provision.yml's first play: the sglang role's entry point `service_lock` sets the host fact the nixl role
    installs NIXL from (the release's lock in pypi mode, nothing in sim mode), and refuses a release without one."""
    body = ("    - ansible.builtin.include_role:\n        name: pdfleet.cluster.sglang\n"
            "        tasks_from: service_lock\n"
            "    - ansible.builtin.debug:\n        msg: \"FACT={{ sglang_service_lock | hash('sha256') }}\"\n")
    version = "0.5.23"
    proc = check_play(tmp_path, body, {**plan_inputs("sglang", version), "sglang_install_mode": mode})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    lock = (ROLE_DIR / "files" / "service" / f"sglang-{version}.lock").read_text() if mode == "pypi" else ""
    assert f"FACT={hashlib.sha256(lock.encode()).hexdigest()}" in proc.stdout, proc.stdout[-2000:]
    refused = check_play(tmp_path, body, {**plan_inputs("sglang"), "sglang_install_mode": "pypi",
                                          "sglang_version": "9.9.9"})
    out = " ".join((refused.stdout + refused.stderr).split())
    assert refused.returncode != 0 and "has none for it" in out and "changed=0" in out, out[-3000:]


def test_the_nixl_role_refuses_pypi_mode_without_the_service_lock_before_any_change(tmp_path: Path) -> None:
    from role_inputs import plan_inputs as inputs_of

    inputs = {**inputs_of("nixl"), "nixl_install_mode": "pypi", "nixl_service_lock": "",
              "nixl_venv": str(tmp_path / "venv"), "nixl_ucx_info": "/nonexistent/ucx_info"}
    proc = check_play(tmp_path, "    - ansible.builtin.include_role:\n        name: pdfleet.cluster.nixl\n", inputs,
                      system_path=True)  # the probe runs dpkg-query
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0, out[-3000:]
    assert ("localhost: nixl_install_mode pypi installs NIXL from the service venv hash lock, and nixl_service_lock "
            "is empty") in out, out[-3000:]
    assert "changed=0" in out and "Install UCX with its CUDA" not in out, out[-3000:]  # apply.yml never ran
