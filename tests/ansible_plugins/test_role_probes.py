"""Role probes (files/probe.py, run by pdfleet_probe) on a host with odd files: a file owned by a user or group
that no longer exists is reported with the number, not a crash of the role's look."""

from __future__ import annotations

import base64
import hashlib
import os
import time
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT

from ansible_plugins.probes import fake_systemctl, run_probe

ROLES = REPO_ROOT / "ansible" / "roles"
NOBODY_ID = 54321  # no user or group on a test machine has it
CUDA_WANT = {"package": "pdfleet-no-such-package", "package_version": "", "profile": None}  # cuda_toolkit's "want"
# pdfleet_monitoring's "want": its files at paths that do not exist, the unit enabled and active
MONITORING_WANT = {"paths": dict.fromkeys(("rules", "config", "defaults"), "/nonexistent/pdfleet"),
                   "files": {key: {} for key in ("rules", "config", "defaults")},
                   "unit": {"enabled": "enabled", "active": "active"}}


@pytest.fixture
def orphan(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("chown to an unknown uid needs root")
    f = tmp_path / "orphan.conf"
    f.write_text("left behind\n")
    os.chown(f, NOBODY_ID, NOBODY_ID)
    return f


def test_monitoring_probe_names_an_unknown_owner_by_number(orphan: Path) -> None:
    out = run_probe("pdfleet_monitoring", {"package": "pdfleet-no-such-package", "files": [str(orphan)],
                                        "unit": "pdfleet-no-such.service", "want": MONITORING_WANT})
    assert out["files"][str(orphan)]["owner"] == str(NOBODY_ID)
    assert out["files"][str(orphan)]["group"] == str(NOBODY_ID)
    assert out["installed"] is False


def test_cuda_toolkit_probe_names_an_unknown_owner_by_number(orphan: Path, tmp_path: Path) -> None:
    out = run_probe("cuda_toolkit", {"source": str(tmp_path / "none.sources"), "profile": str(orphan),
                                  "nvcc": str(tmp_path / "no-nvcc"), "want": CUDA_WANT})
    assert (out["profile"]["owner"], out["profile"]["group"]) == (str(NOBODY_ID), str(NOBODY_ID))
    assert out["source_exists"] is False


def _driver_want(none: str) -> dict:
    """The nvidia_driver probe's wanted state (vars/main.yml: its settings' want), every path `none`."""
    state = {"mode": "0644", "owner": "root", "group": "root"}
    return {"version": "580.95.05", "check_mode": False, "persistenced": True,
            "unit": {"enabled": "enabled", "active": "active"},
            "dirs": {entry: {"path": none, "state": state} for entry in ("keyring_dir", "blacklist_dir")},
            "files": {entry: {"path": none, "state": state} for entry in ("key", "source", "pin", "blacklist")},
            "pin_sha256": {}}


def _settings(tmp_path: Path) -> dict[str, dict]:
    """Settings for each role's look, every path under tmp_path: nothing the role manages exists."""
    none = str(tmp_path / "none")
    return {
        "cuda_toolkit": {"source": none, "profile": none, "nvcc": none, "want": CUDA_WANT},
        "model": {"path": none, "files": True, "want": {"dir": {"mode": "0755", "owner": "root", "group": "root"},
                                                        "standin": None}},
        "nixl": {"venv": none, "ucx_info": none},
        "nvidia_driver": {"files": [none], "dirs": [none], "exists": [none], "modinfo": none,
                          "loaded_version_path": none, "unit": "pdfleet-no-such.service", "want": _driver_want(none)},
        "pdfleet_firewall": {"package": "pdfleet-no-such-package", "path": none, "conf": none,
                             "include": f'include "{none}"', "table": "pdfleet-no-such-table",
                             "unit": "pdfleet-no-such.service", "reserved_proc": none, "reserved_path": none,
                             "want": {"present": False, "file": None, "reserved_ports": ""}},
        "pdfleet_monitoring": {"package": "pdfleet-no-such-package", "files": [none],
                               "unit": "pdfleet-no-such.service", "want": MONITORING_WANT},
        "pdfleet_units": {"user": "pdfleet-no-such-user", "group": "pdfleet-no-such-group", "dirs": [none],
                          "files": [none], "units": ["pdfleet-no-such.service"], "unit_dir": none,
                          "unit_glob": "pdfleet-*.service", "planned": []},
        "pdfleet_watchdog": {"debs": ["pdfleet-no-such-package"], "user": "pdfleet-no-such-user",
                             "group": "pdfleet-no-such-group", "dirs": [none], "files": [none], "exists": [none],
                             "venv": none, "unit": "pdfleet-no-such.service"},
        "sglang": {"debs": ["pdfleet-no-such-package"], "venv": none, "conn_file": "conn.py", "files": [none]},
    }


def test_every_role_probe_runs_with_the_shared_helpers_and_finds_nothing(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    assert set(settings) == {p.parent.parent.name for p in ROLES.glob("*/files/probe.py")}
    none = str(tmp_path / "none")
    for role, cfg in settings.items():
        out = run_probe(role, cfg)
        states = [v for key in ("files", "dirs") for v in (out.get(key) or {}).values()]
        assert states == [None] * len(states), (role, out)
        if "debs_missing" in out:
            assert out["debs_missing"] == ["pdfleet-no-such-package"], role
    assert run_probe("pdfleet_units", settings["pdfleet_units"])["user"] is None
    assert run_probe("model", settings["model"]) == {"dir": None, "files": {},
                                                  "differs": {"dir": True, "standin": False}}
    assert none not in str(run_probe("nixl", settings["nixl"])["dists"])
    # pdfleet_firewall: nothing there, nothing reserved: nothing differs (a host without pdfleet's firewall).
    firewall = run_probe("pdfleet_firewall", settings["pdfleet_firewall"])
    assert firewall["reserved"] == {"live": None, "file_text": None, "want_live": "", "file": None}
    assert not any(firewall["differs"].values()), firewall["differs"]


def test_watchdog_probe_names_a_changed_wheel_file(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    lib = venv / "lib" / "python3.11" / "site-packages"
    (lib / "pdfleet-1.0.dist-info").mkdir(parents=True)
    (lib / "pdfleet").mkdir()
    (lib / "pdfleet" / "a.py").write_text("x = 1\n")
    h = base64.urlsafe_b64encode(hashlib.sha256(b"x = 1\n").digest()).rstrip(b"=").decode()
    (lib / "pdfleet-1.0.dist-info" / "RECORD").write_text(f"pdfleet/a.py,sha256={h},6\n")
    cfg = _settings(tmp_path)["pdfleet_watchdog"] | {"venv": str(venv)}
    out = run_probe("pdfleet_watchdog", cfg)
    assert (out["dists"], out["wheel_bad"]) == (["pdfleet==1.0"], "")
    (lib / "pdfleet" / "a.py").write_text("x = 2\n")
    changed = run_probe("pdfleet_watchdog", cfg)["wheel_bad"]
    assert changed == f"{lib / 'pdfleet' / 'a.py'} (sha256 differs from the RECORD)"


def _install_fake_wheel(lib: Path, dist: str, package: str, text: str) -> Path:
    """A distribution `dist` in site-packages `lib` with one module, its RECORD naming the module's sha256."""
    (lib / f"{dist}-0.1.0.dist-info").mkdir(parents=True)
    (lib / package).mkdir()
    module = lib / package / "a.py"
    module.write_text(text)
    h = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    (lib / f"{dist}-0.1.0.dist-info" / "RECORD").write_text(f"{package}/a.py,sha256={h},{len(text)}\n")
    return module


def test_sglang_probe_checks_both_sim_wheels(tmp_path: Path) -> None:
    """Sim mode installs pdfleet and pdfleet-sim: the look is good only when both are installed and unedited."""
    venv = tmp_path / "venv"
    lib = venv / "lib" / "python3.11" / "site-packages"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    _install_fake_wheel(lib, "pdfleet", "pdfleet", "x = 1\n")
    cfg = _settings(tmp_path)["sglang"] | {"venv": str(venv), "wheel_dists": ["pdfleet", "pdfleet_sim"]}
    out = run_probe("sglang", cfg)
    assert (out["wheel_ok"], out["wheel_bad"]) == (False, "pdfleet_sim: not installed")
    worker = _install_fake_wheel(lib, "pdfleet_sim", "pdfleet_sim", "y = 1\n")
    out = run_probe("sglang", cfg)
    assert (out["wheel_ok"], out["wheel_bad"]) == (True, ""), out
    worker.write_text("y = 2\n")
    out = run_probe("sglang", cfg)
    assert (out["wheel_ok"], out["wheel_bad"]) == (False, f"{worker} (sha256 differs from the RECORD)")
    assert run_probe("sglang", cfg | {"wheel_dists": ["pdfleet"]})["wheel_ok"] is True  # the production wheel alone


def test_units_probe_names_a_unit_started_before_its_paths_last_changed(tmp_path: Path) -> None:
    """The restart a stopped run still owes: a unit whose code changed after it started is named with the path;
    a change within the margin after the start, or of another unit's paths, is not."""
    unit = "pdfleet-prefill0.service"
    started = int(time.time()) - 600
    code = tmp_path / "lib" / "pkg-1.0.dist-info"
    code.mkdir(parents=True)
    os.utime(code, (started - 3600, started - 3600))  # installed long before the unit started
    fake_systemctl(tmp_path / "bin", unit, started)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    settings = {"units": [unit], "stale_paths": {unit: [str(tmp_path / "lib" / "*.dist-info")]}}
    out = run_probe("pdfleet_units", settings, env)
    assert out["units"] == {unit: {"enabled": "enabled", "active": "active"}}
    assert out["stale"] == {}
    os.utime(code, (started + 1, started + 1))  # written just after the start (within the margin)
    assert run_probe("pdfleet_units", settings, env)["stale"] == {}
    code.touch()  # a newer install, after the unit started
    stale = run_probe("pdfleet_units", settings, env)["stale"]
    assert list(stale) == [unit] and str(code) in stale[unit]
    other = {"units": [unit], "stale_paths": {unit: [str(tmp_path / "none" / "*")]}}
    assert run_probe("pdfleet_units", other, env)["stale"] == {}  # only the unit's own paths count


def test_the_driver_probe_reads_the_os_and_picks_its_distributions_packages(tmp_path: Path) -> None:
    """The driver's look reads the OS facts itself and asks dpkg only about this distribution's packages (its entry
    by name, its release by version or major version) and the running kernel's headers; a distribution or a release
    the role has no entry for is reported as unsupported."""
    import os

    cfg = _settings(tmp_path)["nvidia_driver"]
    here = run_probe("nvidia_driver", cfg | {"by_distribution": {}})
    facts = here["os"]
    assert facts["kernel"] == os.uname().release and facts["distribution"] and facts["os_family"] == "Debian"
    assert (here["supported"], here["packages"], here["entry"], here["repo_distro"]) == (False, {}, "", "")
    assert here["dist"] == {"packages": [], "package_revision": "", "hold_regex": "", "pin_globs": [],
                            "prerequisites": [], "releases": {}}
    # this machine's dpkg has python3 and coreutils installed, not the stand-in names
    entry = {"packages": ["coreutils", "pdfleet-no-such-package"], "prerequisites": ["python3"], "hold_regex": "",
             "releases": {facts["distribution_major_version"]: "here-path"}}
    found = run_probe("nvidia_driver", cfg | {"by_distribution": {facts["distribution"]: entry,
                                                               "NoSuchOS": {"packages": ["bash"]}}})
    assert (found["supported"], found["entry"], found["repo_distro"]) == (True, facts["distribution"], "here-path")
    assert found["release"] == facts["distribution_major_version"]
    assert found["dist"]["packages"] == entry["packages"] and found["dist"]["pin_globs"] == []
    assert {"coreutils", "python3"} <= set(found["packages"]) and "bash" not in found["packages"], found
    assert "pdfleet-no-such-package" not in found["packages"]
    # the same distribution at a release it has no entry for: unsupported, nothing asked of dpkg
    elsewhere = {facts["distribution"]: entry | {"releases": {"0": "x"}}}
    other = run_probe("nvidia_driver", cfg | {"by_distribution": elsewhere})
    assert (other["supported"], other["entry"], other["packages"]) == (False, "", {})


def test_the_driver_probe_reads_the_module_version_and_licence_from_one_modinfo(tmp_path: Path) -> None:
    """One `modinfo nvidia` gives both fields (the first line of each key, as modinfo prints them); no module: both
    empty, not a crash."""
    calls = tmp_path / "calls"
    modinfo = tmp_path / "modinfo"
    modinfo.write_text(f"""#!/bin/sh
echo "$@" >> {calls}
[ "$1" = nvidia ] || {{ echo "modinfo: ERROR: Module $1 not found." >&2; exit 1; }}
cat <<'OUT'
filename:       /lib/modules/6.1.0-40-amd64/updates/dkms/nvidia.ko
import_ns:      DMA_BUF
alias:          char-major-195-*
version:        580.95.05
supported:      external
license:        Dual MIT/GPL
parm:           NVreg_ResmanDebugLevel:int
parm:           NVreg_RmLogonRC:int
version:        not-the-first
OUT
""")
    modinfo.chmod(0o755)
    cfg = _settings(tmp_path)["nvidia_driver"] | {"modinfo": str(modinfo)}
    out = run_probe("nvidia_driver", cfg)
    assert (out["module_version"], out["module_license"]) == ("580.95.05", "Dual MIT/GPL")
    assert calls.read_text().splitlines() == ["nvidia"]
    missing = tmp_path / "no-modinfo"
    assert {k: run_probe("nvidia_driver", cfg | {"modinfo": str(missing)})[k]
            for k in ("module_version", "module_license")} == {"module_version": "", "module_license": ""}
