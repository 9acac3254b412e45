"""The pdfleet_watchdog probe decides what differs on the router host (files/probe.py: differs()): each entry, the
gate of one task of tasks/apply.yml, is true where its part differs and false on a converged host, from the
settings' "want" (the files' states, the pins, the remediation) and what the probe found. Called directly on found
states and run whole against files under tmp_path."""

from __future__ import annotations

import base64
import copy
import hashlib
from pathlib import Path
from types import ModuleType

import pytest
from pdfleet.versions import WATCHDOG_STATE_DIR

from ansible_plugins.probes import change_account, load_probe, run_probe

ROLE = "pdfleet_watchdog"
PATHS = {"plan": "/etc/pdfleet-watchdog/plan.json", "command": "/usr/local/bin/pdfleet-watchdog",
         "unit": "/etc/systemd/system/pdfleet-watchdog.service",
         "polkit": "/etc/polkit-1/rules.d/50-pdfleet-watchdog.rules",
         "marker": "/opt/pdfleet-watchdog/venv/pdfleet-wheel.sha256",
         "lock": "/opt/pdfleet-watchdog/requirements.lock",
         "venv_python": "/opt/pdfleet-watchdog/venv/bin/python", "old_tree": "/opt/pdfleet-watchdog/lib"}
FILES = ("plan", "command", "unit", "marker", "lock", "polkit")


@pytest.fixture(scope="module")
def probe() -> ModuleType:
    return load_probe(ROLE)


def _state(key: str, sha: str = "a" * 64) -> dict:
    return {"sha256": sha, "mode": "0644", "owner": "root", "group": "root"}


def _cfg(remediation: str = "alert") -> dict:
    """Settings as vars/main.yml builds them (the paths are only keys here)."""
    files = {PATHS[k]: _state(k) for k in FILES}
    if remediation != "restart":
        files[PATHS["polkit"]]["sha256"] = ""  # vars/main.yml: no rule wanted
    return {"want": {"paths": PATHS,
                     "user": {"group": "pdfleet-watchdog", "groups": ["systemd-journal"],
                              "shell": "/usr/sbin/nologin", "home": str(WATCHDOG_STATE_DIR)},
                     "dirs": {"/etc/pdfleet-watchdog": {"mode": "0750", "owner": "root",
                                                        "group": "pdfleet-watchdog"}},
                     "files": files,
                     "pins": ["Prometheus_Client==0.26.0", "aiohttp==3.14.5", "PyYAML==6.0.4"],
                     "remediation": remediation}}


def _converged(cfg: dict) -> dict:
    want = cfg["want"]
    restart = want["remediation"] == "restart"
    return {"debs_missing": [], "group": "pdfleet-watchdog",
            "user": {**want["user"], "groups": ["adm", "systemd-journal"]},
            "dirs": copy.deepcopy(want["dirs"]), "files": copy.deepcopy(want["files"]),
            "exists": {PATHS["venv_python"]: True, PATHS["old_tree"]: False, PATHS["polkit"]: restart},
            "dists": ["aiohttp==3.14.5", "pdfleet==1.0", "prometheus-client==0.26.0", "pyyaml==6.0.4"],
            "wheel_bad": "", "unit": {"enabled": "enabled", "active": "active"}}


@pytest.mark.parametrize("remediation", ["alert", "restart"])
def test_a_converged_host_differs_in_nothing(probe: ModuleType, remediation: str) -> None:
    cfg = _cfg(remediation)
    out = probe.differs(cfg, _converged(cfg))
    assert set(out) == set(probe.DIFFERS)
    assert not any(out.values()), out


def _change(found: dict, change: str) -> None:
    if change == "deb missing":
        found["debs_missing"] = ["python3-venv"]
    elif change_account(found, change):
        pass
    elif change == "config_dir mode":
        found["dirs"]["/etc/pdfleet-watchdog"]["mode"] = "0755"
    elif change == "config_dir missing":
        found["dirs"]["/etc/pdfleet-watchdog"] = None
    elif change.startswith("file "):
        key, how = change.split()[1:]
        found["files"][PATHS[key]] = None if how == "missing" else {**found["files"][PATHS[key]], how: "x"}
    elif change.startswith("exists "):
        key = change.split()[1]
        found["exists"][PATHS[key]] = not found["exists"][PATHS[key]]
    elif change == "dists other version":
        found["dists"] = [d.replace("3.14.5", "3.14.4") for d in found["dists"]]
    elif change.startswith("dists "):
        found["dists"] = [d for d in found["dists"] if not d.startswith(change.split()[1])]
    elif change.startswith("wheel_bad"):
        found["wheel_bad"] = change.split(" ", 1)[1]
    elif change.startswith("unit "):
        key, value = change.split()[1:]
        found["unit"][key] = value


CASES = [
    ("alert", "deb missing", "debs"),
    ("alert", "group missing", "group"),
    ("alert", "user missing", "user"),
    ("alert", "user group users", "user"),
    ("alert", "user groups adm", "user"),  # not in systemd-journal
    ("alert", "user shell /bin/bash", "user"),
    ("alert", "user home /home/w", "user"),
    ("alert", "config_dir mode", "config_dir"),
    ("alert", "config_dir missing", "config_dir"),
    ("alert", "file plan missing", "plan"),
    ("alert", "file plan sha256", "plan"),
    ("alert", "file plan group", "plan"),
    ("alert", "exists venv_python", "venv"),
    ("alert", "dists pyyaml", "pins"),
    ("alert", "file lock sha256", "pins"),  # a new hash lock: pip installs it again
    ("alert", "file lock missing", "pins"),
    ("alert", "dists other version", "pins"),
    ("alert", "wheel_bad not installed", "wheel"),
    ("alert", "wheel_bad /x/a.py (sha256 differs from the RECORD)", "wheel"),
    ("alert", "file marker sha256", "wheel"),
    ("alert", "file marker missing", "wheel"),
    ("alert", "exists old_tree", "old_tree"),
    ("alert", "file command mode", "command"),
    ("alert", "file command missing", "command"),
    ("restart", "file polkit sha256", "polkit"),
    ("restart", "file polkit missing", "polkit"),
    ("alert", "exists polkit", "polkit_gone"),
    ("alert", "file unit sha256", "unit"),
    ("alert", "file unit owner", "unit"),
    ("alert", "unit active failed", "running"),
    ("alert", "unit enabled unknown", "running"),
]


@pytest.mark.parametrize(("remediation", "change", "entry"), CASES)
def test_each_difference_sets_its_entry_alone(probe: ModuleType, remediation: str, change: str, entry: str) -> None:
    cfg = _cfg(remediation)
    found = _converged(cfg)
    _change(found, change)
    out = probe.differs(cfg, found)
    assert {k for k, v in out.items() if v} == {entry}, out


def test_every_entry_has_a_case() -> None:
    assert {entry for _r, _c, entry in CASES} == set(load_probe(ROLE).DIFFERS)


def test_the_polkit_rule_counts_by_remediation(probe: ModuleType) -> None:
    """In alert mode a rule that differs is no difference (none is wanted) but one that exists is (polkit_gone); in
    restart mode one that exists is wanted, and one missing differs."""
    alert = _cfg("alert")
    found = _converged(alert)
    found["files"][PATHS["polkit"]] = _state("polkit", "b" * 64)
    assert not any(probe.differs(alert, found).values())
    restart = _cfg("restart")
    found = _converged(restart)
    assert not probe.differs(restart, found)["polkit_gone"]
    found["exists"][PATHS["polkit"]] = False
    found["files"][PATHS["polkit"]] = None
    assert probe.differs(restart, found)["polkit"]


def test_pins_are_compared_as_the_venv_names_them(probe: ModuleType) -> None:
    """A pin is normalised as dists_of names the installed distributions (lower case, runs of -_. as one -); a pin
    that is not "name==version" never matches, so it always counts (pip decides)."""
    assert probe.pins_missing(["Prometheus_Client==0.26.0", "zope.interface==7.0"],
                              ["prometheus-client==0.26.0", "zope-interface==7.0"]) == []
    assert probe.pins_missing(["jinja2>=3"], ["jinja2==3.1.6"]) == ["jinja2>=3"]
    cfg = _cfg()
    cfg["want"]["pins"] = [*cfg["want"]["pins"], "jinja2>=3"]
    assert probe.differs(cfg, _converged(cfg))["pins"]


def test_the_whole_probe_reports_differs_of_what_it_found(probe: ModuleType, tmp_path: Path) -> None:
    """Run whole on tmp_path: the wheel in the venv and its marker as wanted (wheel false), then a hand edit of an
    installed file and a marker of another wheel (wheel true); the pins against the venv's distributions."""
    venv = tmp_path / "venv"
    lib = venv / "lib" / "python3.11" / "site-packages"
    (lib / "pdfleet-1.0.dist-info").mkdir(parents=True)
    (lib / "PyYAML-6.0.4.dist-info").mkdir()
    (lib / "pdfleet").mkdir()
    module = lib / "pdfleet" / "a.py"
    module.write_text("x = 1\n")
    h = base64.urlsafe_b64encode(hashlib.sha256(b"x = 1\n").digest()).rstrip(b"=").decode()
    (lib / "pdfleet-1.0.dist-info" / "RECORD").write_text(f"pdfleet/a.py,sha256={h},6\n")
    marker = venv / "pdfleet-wheel.sha256"
    marker.write_text("1" * 64)
    marker.chmod(0o644)
    paths = {k: str(tmp_path / k) for k in PATHS} | {"marker": str(marker)}
    marker_state = {"sha256": hashlib.sha256(b"1" * 64).hexdigest(), "mode": "0644"}
    found_marker = run_probe(ROLE, {"debs": [], "user": "pdfleet-no-such-user", "group": "pdfleet-no-such-group",
                                    "dirs": [], "files": [str(marker)], "exists": [], "venv": str(venv),
                                    "unit": "pdfleet-no-such.service"})["files"][str(marker)]
    marker_state |= {"owner": found_marker["owner"], "group": found_marker["group"]}
    want = _cfg()["want"] | {"paths": paths, "pins": ["pyyaml==6.0.4"]}
    want["files"] = {paths[k]: None for k in FILES} | {str(marker): marker_state}
    want["dirs"] = {}
    cfg = {"debs": [], "user": "pdfleet-no-such-user", "group": "pdfleet-no-such-group", "dirs": [],
           "files": [paths[k] for k in FILES], "exists": [paths["venv_python"], paths["old_tree"], paths["polkit"]],
           "venv": str(venv), "unit": "pdfleet-no-such.service", "want": want}

    def true_entries(settings: dict) -> set[str]:
        out = run_probe(ROLE, settings)
        assert set(out["differs"]) == set(probe.DIFFERS)
        assert out["differs"] == probe.differs(settings, {k: v for k, v in out.items() if k != "differs"})
        return {k for k, v in out["differs"].items() if v}

    # no such user, group or unit, and no venv python here: those differ; the files, wheel and pins are as wanted
    base = {"group", "user", "venv", "running"}
    assert true_entries(cfg) == base
    assert true_entries(cfg | {"want": want | {"pins": ["PyYAML==6.0.5"]}}) == base | {"pins"}
    module.write_text("x = 2\n")
    assert true_entries(cfg) == base | {"wheel"}
    module.write_text("x = 1\n")
    marker.write_text("2" * 64)
    assert true_entries(cfg) == base | {"wheel"}
    Path(paths["old_tree"]).mkdir()
    assert true_entries(cfg) == base | {"wheel", "old_tree"}
