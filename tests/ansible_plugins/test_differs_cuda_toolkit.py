"""The cuda_toolkit probe decides what differs (files/probe.py: differs) from the wanted state in its settings: each
entry is true on a host that differs and false on a converged one, as the Jinja in vars/main.yml it replaced was."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from ansible_plugins.probes import load_probe, run_probe

PKG = "cuda-toolkit-13-0"
PROFILE = {"sha256": "a" * 64, "mode": "0644", "owner": "root", "group": "root"}


@pytest.fixture(scope="module")
def probe():
    return load_probe("cuda_toolkit")


def _want(**over) -> dict:
    return {"want": {"package": PKG, "package_version": "", "profile": dict(PROFILE), **over}}


def _found(packages: dict | None = None, profile: dict | None = None) -> dict:
    return {"packages": {PKG: "13.0.2-1"} if packages is None else packages, "source_exists": True,
            "profile": dict(PROFILE) if profile is None else profile,
            "nvcc": {"rc": 0, "stdout": "release 13.0,", "msg": ""}}


def test_a_converged_host_differs_in_nothing(probe) -> None:
    out = probe.differs(_want(), _found())
    assert out == {"package": False, "profile": False}
    assert set(out) == set(probe.DIFFERS)


def test_package_differs_when_missing_or_not_at_its_pin(probe) -> None:
    assert probe.differs(_want(), _found(packages={}))["package"] is True
    assert probe.differs(_want(), _found(packages={"cuda-toolkit-12-8": "12.8.1-1"}))["package"] is True
    assert probe.differs(_want(package_version="13.0.1-1"), _found())["package"] is True
    # pinned and at the pin; not pinned: any installed version is right
    assert probe.differs(_want(package_version="13.0.2-1"), _found())["package"] is False
    assert probe.differs(_want(package_version=""), _found())["package"] is False


def test_profile_differs_when_managed_and_missing_or_changed(probe) -> None:
    assert probe.differs(_want(), {**_found(), "profile": None})["profile"] is True
    for key, value in (("sha256", "b" * 64), ("mode", "0755"), ("owner", "nobody"), ("group", "adm")):
        assert probe.differs(_want(), _found(profile={**PROFILE, key: value}))["profile"] is True, key
    # not managed (cuda_toolkit_profile false): whatever is there is left alone
    assert probe.differs(_want(profile=None), {**_found(), "profile": None})["profile"] is False
    assert probe.differs(_want(profile=None), _found(profile={**PROFILE, "mode": "0600"}))["profile"] is False


def _settings(tmp_path: Path, profile: dict | None, package: str, version: str = "") -> dict:
    return {"source": str(tmp_path / "none.sources"), "profile": str(tmp_path / "pdfleet-cuda.sh"),
            "nvcc": str(tmp_path / "no-nvcc"), "packages": [package],
            "want": {"package": package, "package_version": version, "profile": profile}}


def test_a_whole_run_prints_differs_from_what_it_found(tmp_path: Path, probe) -> None:
    script = tmp_path / "pdfleet-cuda.sh"
    script.write_text("PATH=/usr/local/cuda-13.0/bin:$PATH\n")
    script.chmod(0o644)
    state = probe.stat_of(str(script), digest=True)
    assert state["sha256"] == hashlib.sha256(script.read_bytes()).hexdigest()
    out = run_probe("cuda_toolkit", _settings(tmp_path, state, "pdfleet-no-such-package"))
    assert set(out["differs"]) == set(probe.DIFFERS)
    assert out["differs"] == {"package": True, "profile": False}
    script.write_text("changed by hand\n")
    assert run_probe("cuda_toolkit", _settings(tmp_path, state, "pdfleet-no-such-package"))["differs"]["profile"]


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg (a Debian or Ubuntu host)")
def test_a_whole_run_finds_an_installed_package_and_its_version(tmp_path: Path, probe) -> None:
    version = probe.installed_packages()["dpkg"]
    out = run_probe("cuda_toolkit", _settings(tmp_path, None, "dpkg"))
    assert out["packages"] == {"dpkg": version}
    assert out["differs"] == {"package": False, "profile": False}
    assert run_probe("cuda_toolkit", _settings(tmp_path, None, "dpkg", version))["differs"]["package"] is False
    assert run_probe("cuda_toolkit", _settings(tmp_path, None, "dpkg", version + "x"))["differs"]["package"] is True
    assert run_probe("cuda_toolkit", _settings(tmp_path, PROFILE, "dpkg"))["differs"]["profile"] is True
