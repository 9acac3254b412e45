"""The pdfleet_monitoring probe decides what differs (files/probe.py: differs) from the wanted state in its settings:
each entry is true on a host that differs and false on a converged one, as the Jinja in vars/main.yml it replaced
was."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
from pathlib import Path

import pytest

from ansible_plugins.probes import load_probe, run_probe

PATHS = {"rules": "/etc/prometheus/pdfleet-alerts.yml", "config": "/etc/prometheus/prometheus.yml",
         "defaults": "/etc/default/prometheus"}
STATES = {name: {"sha256": c * 64, "mode": "0644", "owner": "root", "group": "root"}
          for name, c in (("rules", "a"), ("config", "b"), ("defaults", "c"))}
RUNNING = {"enabled": "enabled", "active": "active"}


@pytest.fixture(scope="module")
def probe():
    return load_probe("pdfleet_monitoring")


def _cfg() -> dict:
    return {"want": {"paths": dict(PATHS), "files": {k: dict(v) for k, v in STATES.items()}, "unit": dict(RUNNING)}}


def _found(**files: dict | None) -> dict:
    return {"installed": True, "files": {PATHS[k]: files.get(k, dict(v)) for k, v in STATES.items()},
            "unit": dict(RUNNING)}


def test_a_converged_host_differs_in_nothing(probe) -> None:
    out = probe.differs(_cfg(), _found())
    assert out == dict.fromkeys(probe.DIFFERS, False)
    assert set(out) == set(probe.DIFFERS) == {"package", "rules", "config", "defaults", "running"}


def test_package_differs_when_prometheus_is_not_installed(probe) -> None:
    assert probe.differs(_cfg(), {**_found(), "installed": False}) == {**dict.fromkeys(probe.DIFFERS, False),
                                                                       "package": True}


@pytest.mark.parametrize("name", ["rules", "config", "defaults"])
def test_a_file_differs_when_missing_or_not_as_wanted(probe, name: str) -> None:
    others = dict.fromkeys(probe.DIFFERS, False)
    assert probe.differs(_cfg(), _found(**{name: None})) == {**others, name: True}
    for key, value in (("sha256", "d" * 64), ("mode", "0600"), ("owner", "prometheus"), ("group", "adm")):
        assert probe.differs(_cfg(), _found(**{name: {**STATES[name], key: value}})) == {**others, name: True}, key


@pytest.mark.parametrize("unit", [{"enabled": "disabled", "active": "active"},
                                  {"enabled": "enabled", "active": "inactive"},
                                  {"enabled": "unknown", "active": "unknown"}])
def test_running_differs_unless_enabled_and_active(probe, unit: dict) -> None:
    assert probe.differs(_cfg(), {**_found(), "unit": unit})["running"] is True
    assert probe.differs(_cfg(), {**_found(), "unit": dict(RUNNING)})["running"] is False


def test_a_whole_run_prints_differs_from_what_it_found(tmp_path: Path, probe) -> None:
    paths = {name: str(tmp_path / name) for name in PATHS}
    for name, path in paths.items():
        Path(path).write_text(f"{name}\n")
        os.chmod(path, 0o644)
    owner, group = probe.stat_of(paths["rules"])["owner"], probe.stat_of(paths["rules"])["group"]
    want = {name: {"sha256": hashlib.sha256(f"{name}\n".encode()).hexdigest(), "mode": "0644", "owner": owner,
                   "group": group} for name in PATHS}
    settings = {"package": "pdfleet-no-such-package", "files": list(paths.values()), "unit": "pdfleet-no-such.service",
                "want": {"paths": paths, "files": want, "unit": dict(RUNNING)}}
    out = run_probe("pdfleet_monitoring", settings)
    assert set(out["differs"]) == set(probe.DIFFERS)
    # no such package, no such unit (or no systemd): those differ; the files are as wanted
    assert out["differs"] == {"package": True, "rules": False, "config": False, "defaults": False, "running": True}
    Path(paths["config"]).write_text("changed by hand\n")
    os.chmod(paths["defaults"], stat.S_IRUSR | stat.S_IWUSR)
    Path(paths["rules"]).unlink()
    out = run_probe("pdfleet_monitoring", settings)
    assert out["differs"] == {"package": True, "rules": True, "config": True, "defaults": True, "running": True}


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg (a Debian or Ubuntu host)")
def test_a_whole_run_finds_an_installed_package(tmp_path: Path, probe) -> None:
    settings = {"package": "dpkg", "files": [], "unit": "pdfleet-no-such.service",
                "want": {"paths": {name: str(tmp_path / name) for name in PATHS}, "files": STATES,
                         "unit": dict(RUNNING)}}
    assert run_probe("pdfleet_monitoring", settings)["differs"]["package"] is False
