"""The pdfleet_units probe decides what of the install differs (files/probe.py: differs()): each entry is true on a
host where its part differs and false on a converged one, from the settings' "want" (data the role's vars build,
never JSON text) and what the probe found. Run whole against files under tmp_path (a stand-in systemctl answers for
the units) and called directly on found states."""

from __future__ import annotations

import copy
import grp
import hashlib
import os
import pwd
import time
from pathlib import Path
from types import ModuleType

import pytest

from ansible_plugins.probes import change_account, fake_systemctl, load_probe, run_probe

ROLE = "pdfleet_units"
UNIT = "pdfleet-prefill0.service"
RUNNING = {"enabled": "enabled", "active": "active"}


@pytest.fixture(scope="module")
def probe() -> ModuleType:
    return load_probe(ROLE)


def _cfg() -> dict:
    """Settings as vars/main.yml builds them for one unit (the paths are only keys here)."""
    return {"user": "pdfleet", "group": "pdfleet", "dirs": ["/etc/pdfleet", "/var/lib/pdfleet"],
            "files": ["/etc/pdfleet/p.env"], "units": [UNIT],
            "want": {"user": {"group": "pdfleet", "groups": ["video"], "shell": "/usr/sbin/nologin",
                              "home": "/var/lib/pdfleet"},
                     "dirs": {"/etc/pdfleet": {"mode": "0750", "owner": "root", "group": "pdfleet"},
                              "/var/lib/pdfleet": {"mode": "0750", "owner": "pdfleet", "group": "pdfleet"}},
                     "files": {"/etc/pdfleet/p.env": {"sha256": "a" * 64, "mode": "0640", "owner": "root",
                                                      "group": "pdfleet"}},
                     "start": True, "restart_on_change": True}}


def _converged(cfg: dict) -> dict:
    """What the probe finds on a host the role converged: everything as wanted."""
    want = cfg["want"]
    return {"group": "pdfleet", "user": {**want["user"], "groups": ["render", "video"]},
            "dirs": copy.deepcopy(want["dirs"]), "files": copy.deepcopy(want["files"]),
            "units": {u: dict(RUNNING) for u in cfg["units"]}, "stale": {}}


def test_a_converged_host_differs_in_nothing(probe: ModuleType) -> None:
    cfg = _cfg()
    out = probe.differs(cfg, _converged(cfg))
    assert set(out) == set(probe.DIFFERS)
    assert not any(out.values()), out


def _found(change: str) -> dict:
    found = _converged(_cfg())
    if change_account(found, change):
        pass
    elif change == "dir missing":
        found["dirs"]["/var/lib/pdfleet"] = None
    elif change == "dir mode":
        found["dirs"]["/etc/pdfleet"]["mode"] = "0755"
    elif change == "dir owner":
        found["dirs"]["/var/lib/pdfleet"]["owner"] = "root"
    elif change == "file missing":
        found["files"]["/etc/pdfleet/p.env"] = None
    elif change.startswith("file "):
        found["files"]["/etc/pdfleet/p.env"][change.split()[1]] = "other"
    elif change == "stale":
        found["stale"] = {UNIT: "/etc/pdfleet/p.env changed 60 s after it started"}
    elif change.startswith("unit "):
        key, value = change.split()[1:]
        found["units"][UNIT][key] = value
    return found


@pytest.mark.parametrize(("change", "entry"), [
    ("group missing", "group"),
    ("user missing", "user"),
    ("user group other", "user"),
    ("user groups render", "user"),  # not in video
    ("user shell /bin/bash", "user"),
    ("user home /home/pdfleet", "user"),
    ("dir missing", "dirs"),
    ("dir mode", "dirs"),
    ("dir owner", "dirs"),
    ("file missing", "files"),
    ("file sha256", "files"),
    ("file mode", "files"),
    ("file owner", "files"),
    ("file group", "files"),
    ("stale", "stale"),
    ("unit enabled disabled", "running"),
    ("unit active failed", "running"),
    ("unit active unknown", "running"),
])
def test_each_difference_sets_its_entry_alone(probe: ModuleType, change: str, entry: str) -> None:
    out = probe.differs(_cfg(), _found(change))
    assert {k for k, v in out.items() if v} == {entry}, out


def test_stale_and_running_count_only_when_units_start_and_restart(probe: ModuleType) -> None:
    """Not starting the units: neither a stopped unit nor a stale one is a difference; not restarting on a change:
    a stale unit is none (a stopped one still is)."""
    found = _found("stale")
    found["units"][UNIT] = {"enabled": "disabled", "active": "inactive"}
    cfg = _cfg()
    assert probe.differs(cfg, found)["stale"] and probe.differs(cfg, found)["running"]
    cfg["want"]["start"] = False
    assert not probe.differs(cfg, found)["stale"] and not probe.differs(cfg, found)["running"]
    cfg["want"] |= {"start": True, "restart_on_change": False}
    assert not probe.differs(cfg, found)["stale"] and probe.differs(cfg, found)["running"]


def test_without_a_wanted_install_there_is_no_verdict(tmp_path: Path) -> None:
    """The probe for the prune alone (no contexts: no "want") says nothing of an install (no silent "nothing
    differs")."""
    out = run_probe("pdfleet_units", {"unit_dir": str(tmp_path), "unit_glob": "pdfleet-*.service", "planned": []})
    assert "differs" not in out and out["present"] == []


def _host(tmp_path: Path) -> tuple[dict, dict[str, str]]:
    """A converged stand-in host under tmp_path for this test's own user: its directories and one file as wanted,
    the unit active and enabled since before the file was written; the settings that want exactly that."""
    me = pwd.getpwuid(os.getuid())
    primary = grp.getgrgid(me.pw_gid).gr_name
    supplementary = sorted(g.gr_name for g in grp.getgrall() if me.pw_name in g.gr_mem)
    conf, state = tmp_path / "etc", tmp_path / "state"
    for d in (conf, state):
        d.mkdir()
        d.chmod(0o750)
    env = conf / "p.env"
    env.write_text("A=1\n")
    env.chmod(0o640)
    started = int(time.time()) + 60  # started after the file was written
    fake_systemctl(tmp_path / "bin", UNIT, started)
    mine = {"owner": me.pw_name, "group": primary}
    cfg = {"user": me.pw_name, "group": primary, "dirs": [str(conf), str(state)], "files": [str(env)],
           "units": [UNIT], "stale_paths": {UNIT: [str(env)]},
           "want": {"user": {"group": primary, "groups": supplementary, "shell": me.pw_shell, "home": me.pw_dir},
                    "dirs": {str(conf): {"mode": "0750", **mine}, str(state): {"mode": "0750", **mine}},
                    "files": {str(env): {"sha256": hashlib.sha256(b"A=1\n").hexdigest(), "mode": "0640", **mine}},
                    "start": True, "restart_on_change": True}}
    return cfg, dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")


def test_the_whole_probe_reports_differs_of_what_it_found(probe: ModuleType, tmp_path: Path) -> None:
    cfg, env = _host(tmp_path)
    out = run_probe(ROLE, cfg, env)
    assert set(out["differs"]) == set(probe.DIFFERS)
    assert not any(out["differs"].values()), out
    assert out["differs"] == probe.differs(cfg, {k: v for k, v in out.items() if k != "differs"})

    def true_entries(settings: dict) -> set[str]:
        return {k for k, v in run_probe(ROLE, settings, env)["differs"].items() if v}

    _conf, state = cfg["dirs"]
    (env_file,) = cfg["files"]
    assert true_entries(cfg | {"group": "pdfleet-no-such-group"}) == {"group"}
    assert true_entries(cfg | {"user": "pdfleet-no-such-user"}) == {"user"}
    want = copy.deepcopy(cfg["want"])
    want["user"]["shell"] = "/usr/sbin/nologin-not"
    assert true_entries(cfg | {"want": want}) == {"user"}
    Path(state).chmod(0o755)
    assert true_entries(cfg) == {"dirs"}
    Path(state).chmod(0o750)
    Path(env_file).write_text("A=2\n")
    os.utime(env_file, (time.time() - 3600, time.time() - 3600))  # before the unit started: not stale
    assert true_entries(cfg) == {"files"}
    Path(env_file).write_text("A=1\n")
    fake_systemctl(tmp_path / "bin", UNIT, int(time.time()) - 600)  # started before the file was last written
    assert true_entries(cfg) == {"stale"}
    fake_systemctl(tmp_path / "bin", UNIT, int(time.time()) + 60, enabled="disabled")
    assert true_entries(cfg) == {"running"}
    assert true_entries(cfg | {"want": cfg["want"] | {"start": False}}) == set()
