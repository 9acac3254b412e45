"""The nvidia_driver probe decides what differs (files/probe.py: differs, persistenced_differs) from the wanted
state its settings carry (vars/main.yml: __nvidia_driver_probe_settings.want), entry by entry as the Jinja it
replaced did: each entry differs on a bad host and not on a converged one."""

from __future__ import annotations

import copy
import grp
import hashlib
import json
import os
import pwd
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from ansible_plugins.probes import load_probe, run_probe

VERSION = "580.95.05"
KERNEL = "6.1.0-40-amd64"
DIR = {"mode": "0755", "owner": "root", "group": "root"}
FILE = {"mode": "0644", "owner": "root", "group": "root"}
SHA = {name: hashlib.sha256(name.encode()).hexdigest() for name in ("key", "source", "pin", "blacklist", "other")}
PACKAGES = ["nvidia-open", "nvidia-driver", "nvidia-smi"]
# Two keys of ours (tests/ansible_plugins/keys, made with gpg for these tests), their fingerprints as gpg printed them.
KEYS = Path(__file__).parent / "keys"
PINNED, OTHER = "9ADA96DDE3ECAD689B1003FD3F249C24329882AC", "94B2BEF66383A1890AC4A9C553D8488F3B18D937"


@pytest.fixture(scope="module")
def probe() -> ModuleType:
    return load_probe("nvidia_driver")


def _cfg() -> dict:
    """Settings as vars/main.yml builds them (only what differs() and persistenced_differs() read)."""
    return {"want": {
        "version": VERSION, "check_mode": False, "persistenced": True,
        "unit": {"enabled": "enabled", "active": "active"},
        "dirs": {"keyring_dir": {"path": "/etc/apt/keyrings", "state": DIR},
                 "blacklist_dir": {"path": "/etc/modprobe.d", "state": DIR}},
        "files": {"key": {"path": "/etc/apt/keyrings/k.asc", "state": FILE},
                  "source": {"path": "/etc/apt/sources.list.d/s.sources", "state": FILE | {"sha256": SHA["source"]}},
                  "pin": {"path": "/etc/apt/preferences.d/p.pref", "state": FILE},
                  "blacklist": {"path": "/etc/modprobe.d/b.conf", "state": FILE | {"sha256": SHA["blacklist"]}}},
        "pin_sha256": {"Debian": SHA["pin"], "Ubuntu": SHA["other"]}, "key_fingerprint": PINNED}}


def _converged() -> dict:
    """What the probe finds on a converged Debian host."""
    pv = VERSION + "-1"
    packages = {name: {"version": pv, "want": "hold"} for name in PACKAGES}
    packages |= {"python3-debian": {"version": "0.1.49", "want": "install"},
                 "ca-certificates": {"version": "20230311", "want": "install"},
                 "linux-headers-" + KERNEL: {"version": "6.1.153-1", "want": "install"}}
    return {
        "os": {"kernel": KERNEL}, "entry": "Debian",
        "dist": {"packages": PACKAGES, "package_revision": "-1",
                 "prerequisites": ["python3-debian", "ca-certificates"]},
        "packages": packages, "unheld": [],
        "dirs": {"/etc/apt/keyrings": DIR, "/etc/modprobe.d": DIR},
        "files": {"/etc/apt/keyrings/k.asc": FILE | {"sha256": SHA["key"]},
                  "/etc/apt/sources.list.d/s.sources": FILE | {"sha256": SHA["source"]},
                  "/etc/apt/preferences.d/p.pref": FILE | {"sha256": SHA["pin"]},
                  "/etc/modprobe.d/b.conf": FILE | {"sha256": SHA["blacklist"]}},
        "key": {"content": "key", "sha256": SHA["key"], "error": "", "fingerprints": [PINNED],
                "fingerprint_error": ""},
        "installed_key": {"fingerprints": [PINNED], "fingerprint_error": ""},
        "module_version": VERSION, "unit": {"enabled": "enabled", "active": "active"},
    }


def _set(path: str, value: object) -> Callable[[dict], None]:
    """A change of found: the value set at a path of keys joined by ">" ("files>/etc/x")."""
    def change(found: dict) -> None:
        *parents, last = path.split(">")
        target = found
        for p in parents:
            target = target[p]
        target[last] = value
    return change


def _drop(path: str) -> Callable[[dict], None]:
    """A change of found: the key at a path of keys joined by ">" removed."""
    def change(found: dict) -> None:
        *parents, last = path.split(">")
        target = found
        for p in parents:
            target = target[p]
        del target[last]
    return change


# entry -> host states on which it differs (each a change of the converged host)
BAD: dict[str, list[Callable[[dict], None]]] = {
    "prerequisites": [_drop("packages>python3-debian")],
    "keyring_dir": [_set("dirs>/etc/apt/keyrings", None), _set("dirs>/etc/apt/keyrings", DIR | {"mode": "0700"})],
    "key": [_set("files>/etc/apt/keyrings/k.asc", None),
            _set("files>/etc/apt/keyrings/k.asc", FILE | {"sha256": SHA["other"]}),  # a rotated key
            _set("files>/etc/apt/keyrings/k.asc", FILE | {"sha256": SHA["key"], "owner": "nobody"}),
            _set("key", {"content": None, "error": "http://x/k.pub: HTTP Error 404"}),  # not downloadable
            _drop("key"),
            # an installed keyring of another key (or of none readable), even when it is what the host had
            _set("installed_key", {"fingerprints": [OTHER], "fingerprint_error": ""}),
            _set("installed_key", {"fingerprints": [PINNED, OTHER], "fingerprint_error": ""}),
            _set("installed_key", {"fingerprints": [], "fingerprint_error": "no ASCII-armoured OpenPGP public key"}),
            _set("installed_key", None)],
    "source": [_set("files>/etc/apt/sources.list.d/s.sources", None),
               _set("files>/etc/apt/sources.list.d/s.sources", FILE | {"sha256": SHA["other"]})],
    "pin": [_set("files>/etc/apt/preferences.d/p.pref", None),
            _set("files>/etc/apt/preferences.d/p.pref", FILE | {"sha256": SHA["other"]}),  # Ubuntu's pin
            _set("files>/etc/apt/preferences.d/p.pref", FILE | {"sha256": SHA["pin"], "mode": "0600"}),
            _set("entry", "")],  # a distribution without an entry
    "blacklist_dir": [_set("dirs>/etc/modprobe.d", None), _set("dirs>/etc/modprobe.d", DIR | {"group": "adm"})],
    "blacklist": [_set("files>/etc/modprobe.d/b.conf", None),
                  _set("files>/etc/modprobe.d/b.conf", FILE | {"sha256": SHA["other"]})],
    "headers": [_drop("packages>linux-headers-" + KERNEL), _set("os>kernel", "6.1.0-41-amd64")],  # a new kernel
    "driver": [_drop("packages>nvidia-smi"),  # one package missing
               _set("packages>nvidia-smi", {"version": "580.82.07-1", "want": "hold"}),  # branches mixed
               _set("dist>package_revision", "-0ubuntu1"),  # all at another version than the pin
               _set("dist>packages", [])],  # no packages (a distribution without an entry)
    "hold": [_set("unheld", ["nvidia-smi"])],
}


def test_a_converged_host_differs_in_nothing(probe: ModuleType) -> None:
    assert probe.differs(_cfg(), _converged()) == dict.fromkeys(probe.DIFFERS, False)
    assert probe.persistenced_differs(_cfg(), _converged()) is False


def test_every_entry_has_bad_cases() -> None:
    assert set(BAD) == set(load_probe("nvidia_driver").DIFFERS)


@pytest.mark.parametrize(("entry", "case"), [(e, i) for e, cases in BAD.items() for i in range(len(cases))])
def test_each_entry_differs_on_its_bad_host_alone(probe: ModuleType, entry: str, case: int) -> None:
    found = copy.deepcopy(_converged())
    BAD[entry][case](found)
    out = probe.differs(_cfg(), found)
    assert set(out) == set(probe.DIFFERS)
    assert out[entry] is True, (entry, case)
    # the other entries stay false (a missing package named by two entries is not among these cases)
    assert [e for e, v in out.items() if v and e != entry] == [], (entry, case, out)


def test_the_pin_follows_the_picked_distribution(probe: ModuleType) -> None:
    found = _converged() | {"entry": "Ubuntu"}
    assert probe.differs(_cfg(), found)["pin"] is True  # Debian's pin on an Ubuntu host
    found["files"] = found["files"] | {"/etc/apt/preferences.d/p.pref": FILE | {"sha256": SHA["other"]}}
    assert probe.differs(_cfg(), found)["pin"] is False


def test_the_driver_is_wanted_at_the_pinned_version_with_the_entrys_revision(probe: ModuleType) -> None:
    cfg = _cfg()
    cfg["want"]["version"] = "580.82.07"  # a new pin: every package differs in version
    assert probe.differs(cfg, _converged())["driver"] is True


@pytest.mark.parametrize(("change", "check_mode", "expected"), [
    ({}, False, False),
    ({"unit": {"enabled": "enabled", "active": "inactive"}}, False, True),
    ({"unit": {"enabled": "disabled", "active": "active"}}, False, True),
    ({"unit": {"enabled": "unknown", "active": "unknown"}}, False, True),  # not installed yet
    ({"unit": {"enabled": "enabled", "active": "inactive"}}, True, True),  # check mode, the pinned module installed
    # check mode before the pinned module is installed: not reported (the unit would not start)
    ({"unit": {"enabled": "unknown", "active": "unknown"}, "module_version": ""}, True, False),
    ({"unit": {"enabled": "unknown", "active": "unknown"}, "module_version": ""}, False, True),
])
def test_persistenced_differs_when_wanted_and_not_running(probe: ModuleType, change: dict, check_mode: bool,
                                                          expected: bool) -> None:
    cfg = _cfg()
    cfg["want"]["check_mode"] = check_mode
    assert probe.persistenced_differs(cfg, _converged() | change) is expected


def test_persistenced_not_wanted_never_differs(probe: ModuleType) -> None:
    cfg = _cfg()
    cfg["want"]["persistenced"] = False
    found = _converged()
    del found["unit"]  # the probe does not ask systemd then (settings: unit "")
    assert probe.persistenced_differs(cfg, found) is False
    cfg["want"]["persistenced"] = True
    assert probe.persistenced_differs(cfg, found) is True  # wanted, and no state read: differs


def _dpkg_version(name: str) -> str:
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", name], capture_output=True, text=True, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def test_the_whole_probe_reports_differs_for_files_on_disk(tmp_path: Path) -> None:
    """The probe run as a host runs it: files, directories and a key (file: URL) under tmp_path in their wanted
    state differ in nothing; removed or changed, they do; a package of the hold pattern not held differs."""
    facts_run = run_probe("nvidia_driver", _whole_settings(tmp_path, {}, ""))
    facts = facts_run["os"]
    coreutils = _dpkg_version("coreutils")
    if not coreutils or facts["os_family"] != "Debian":
        pytest.skip("needs dpkg with coreutils installed")
    version, _, revision = coreutils.rpartition("-")
    entry = {"packages": ["coreutils"], "package_revision": "-" + revision, "prerequisites": ["coreutils"],
             "hold_regex": "", "pin_globs": [], "releases": {facts["distribution_major_version"]: "here"}}
    by_distribution = {facts["distribution"]: entry}
    st = os.stat(tmp_path)
    owner, group = pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name
    paths = _whole_files(tmp_path, owner, group)
    settings = _whole_settings(tmp_path, by_distribution, version, owner, group, paths)
    out = run_probe("nvidia_driver", settings)
    module = load_probe("nvidia_driver")
    assert set(out["differs"]) == set(module.DIFFERS)
    headers = "linux-headers-" + facts["kernel"] not in out["packages"]
    assert out["differs"] == dict.fromkeys(module.DIFFERS, False) | {"headers": headers}, out["differs"]
    assert out["differs"] == module.differs(settings, out)
    assert out["key"]["fingerprints"] == out["installed_key"]["fingerprints"] == [PINNED]
    assert out["key_refusal"] == ""
    assert out["persistenced_differs"] is False  # not wanted here
    # the served key replaced by another key: refused, naming both fingerprints; the installed one still matches
    paths["served"].write_text((KEYS / "key-b.asc").read_text())
    out = run_probe("nvidia_driver", settings)
    assert out["differs"]["key"] is True and out["installed_key"]["fingerprints"] == [PINNED]
    assert OTHER in out["key_refusal"] and PINNED in out["key_refusal"], out["key_refusal"]
    paths["served"].write_text((KEYS / "key-a.asc").read_text())
    # drift: every file and directory gone or changed, the key rotated, the package of the hold pattern not held
    for name in ("key.asc", "source", "pin"):
        (tmp_path / "etc" / name).unlink()
    (tmp_path / "etc" / "modprobe.d" / "b.conf").write_text("blacklist nothing\n")
    (tmp_path / "etc" / "modprobe.d").chmod(0o700)
    (tmp_path / "etc" / "keyrings").chmod(0o700)
    entry["hold_regex"] = "^coreutils$"
    out = run_probe("nvidia_driver", settings)
    assert out["unheld"] == ["coreutils"]
    assert out["differs"] == dict.fromkeys(module.DIFFERS, True) | {"prerequisites": False, "headers": headers,
                                                                      "driver": False}, out["differs"]
    settings["want"]["version"] = version + "~other"  # a new pin
    assert run_probe("nvidia_driver", settings)["differs"]["driver"] is True


def _whole_files(tmp_path: Path, owner: str, group: str) -> dict[str, Path]:
    etc = tmp_path / "etc"
    for d in ("keyrings", "modprobe.d"):
        (etc / d).mkdir(parents=True)
        (etc / d).chmod(0o755)
    paths = {"key": etc / "key.asc", "served": tmp_path / "served.pub", "source": etc / "source", "pin": etc / "pin",
             "blacklist": etc / "modprobe.d" / "b.conf"}
    for name, path in paths.items():
        path.write_text((KEYS / "key-a.asc").read_text() if name in ("key", "served") else f"{name} content\n")
        path.chmod(0o644)
    return paths


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _whole_settings(tmp_path: Path, by_distribution: dict, version: str, owner: str = "root", group: str = "root",
                    paths: dict[str, Path] | None = None) -> dict:
    etc = tmp_path / "etc"
    paths = paths or {n: etc / n for n in ("key", "served", "source", "pin", "blacklist")}
    file = {"mode": "0644", "owner": owner, "group": group}
    directory = {"mode": "0755", "owner": owner, "group": group}

    def sha(name: str) -> str:
        return _sha(paths[name]) if paths[name].is_file() else ""

    return {
        "files": [str(paths[n]) for n in ("key", "source", "pin", "blacklist")],
        "dirs": [str(etc / "keyrings"), str(etc / "modprobe.d")], "exists": [],
        "by_distribution": by_distribution, "key_url": paths["served"].as_uri(),
        "modinfo": str(tmp_path / "no-modinfo"), "loaded_version_path": str(tmp_path / "no-version"), "unit": "",
        "smi_query": "",
        "want": {
            "version": version, "check_mode": False, "persistenced": False,
            "unit": {"enabled": "enabled", "active": "active"},
            "dirs": {"keyring_dir": {"path": str(etc / "keyrings"), "state": directory},
                     "blacklist_dir": {"path": str(etc / "modprobe.d"), "state": directory}},
            "files": {"key": {"path": str(paths["key"]), "state": file},
                      "source": {"path": str(paths["source"]), "state": file | {"sha256": sha("source")}},
                      "pin": {"path": str(paths["pin"]), "state": file},
                      "blacklist": {"path": str(paths["blacklist"]), "state": file | {"sha256": sha("blacklist")}}},
            "pin_sha256": {name: sha("pin") for name in by_distribution}, "key_fingerprint": PINNED}}


def test_the_probe_prints_differs_as_json_data(tmp_path: Path) -> None:
    """differs and persistenced_differs are JSON booleans (the tasks' conditions read them as they are)."""
    out = run_probe("nvidia_driver", _whole_settings(tmp_path, {}, VERSION))
    assert json.loads(json.dumps(out["differs"])) == out["differs"]
    assert all(isinstance(v, bool) for v in [*out["differs"].values(), out["persistenced_differs"]])
