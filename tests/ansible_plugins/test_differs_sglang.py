"""The sglang role's "differs" and "patch" (files/probe.py: differs, patch_differs), decided on the host from the
wanted state in the probe's settings: each entry is true where its task (tasks/apply.yml; tasks/patch.yml for
"patch") has something to put back, false on a converged host (so a second run changes nothing)."""

from __future__ import annotations

import base64
import grp
import hashlib
import os
import pwd
import sys
from pathlib import Path

import pytest
from ansible.plugins.filter.core import to_nice_json
from pdfleet.patch.roleinputs import sglang_inputs

from ansible_plugins.probes import ROLES, load_common, load_probe, run_probe

SGLANG = load_probe("sglang")
COMMON = load_common()
VENV = "/opt/pdfleet/venv"
PURELIB = f"{VENV}/lib/python3.11/site-packages"
CONN_FILE = "sglang/srt/disaggregation/nixl/conn.py"
RECORD = f"{VENV}/pdfleet-record.json"
MARKER = f"{VENV}/pdfleet-wheel.sha256"
STATE = {"mode": "0644", "owner": "root", "group": "root"}
FIELDS = {"version": "0.5.23", "patch_id": "nixl-guard-v2", "patched": True, "parts": [3], "sha256": "b" * 64,
          "install_mode": "sim"}
WANT = {"install_mode": "sim", "pypi": ["sglang==0.5.23", "Foo_Bar==1.0"],
        "sim": ["sglang==0.5.23", "Foo_Bar==1.0", "x.y==2"],
        "pth": STATE | {"content": "/opt/pdfleet-runtime/lib/python3.11/site-packages\n"},
        "wheel_marker": STATE | {"path": MARKER, "content": "a" * 64 + "\n"}, "conn_sha256": "b" * 64,
        "record": STATE | {"path": RECORD, "fields": FIELDS}}
CFG = {"venv": VENV, "conn_file": CONN_FILE, "want": WANT}
DISTS = ["foo-bar==1.0", "pdfleet-sim==1.0", "pdfleet==1.0", "sglang==0.5.23", "x-y==2"]
CONVERGED = {"debs_missing": [], "purelib": PURELIB, "dists": DISTS, "conn_sha256": "b" * 64, "wheel_ok": True,
             "files": {RECORD: STATE | {"content": SGLANG.record_content(FIELDS, PURELIB, CONN_FILE)},
                       MARKER: STATE | {"content": "a" * 64 + "\n"},
                       f"{PURELIB}/pdfleet-runtime.pth": WANT["pth"] | {}}}
PYPI = CFG | {"want": WANT | {"install_mode": "pypi"}}
NONE = dict.fromkeys(SGLANG.DIFFERS, False)
NO_PATCH = dict.fromkeys(SGLANG.PATCH, False)


def test_a_converged_host_differs_in_nothing() -> None:
    for cfg in (CFG, PYPI):
        assert SGLANG.differs(cfg, CONVERGED) == NONE, cfg["want"]["install_mode"]
        assert SGLANG.patch_differs(cfg, CONVERGED) == NO_PATCH
        assert SGLANG.sim_missing(cfg, CONVERGED) == []


def _files(**changes: dict | None) -> dict:
    return {"files": CONVERGED["files"] | {{"record": RECORD, "marker": MARKER,
                                             "pth": f"{PURELIB}/pdfleet-runtime.pth"}[k]: v
                                            for k, v in changes.items()}}


@pytest.mark.parametrize(("entry", "cfg", "found"), [
    ("debs", CFG, {"debs_missing": ["patch"]}),
    ("debs", PYPI, {"debs_missing": ["python3-venv", "patch"]}),
    ("pypi_stack", PYPI, {"dists": [d for d in DISTS if d != "sglang==0.5.23"]}),
    ("pypi_stack", PYPI, {"dists": [d for d in DISTS if not d.startswith("foo-bar")]}),
    ("pypi_stack", PYPI, {"dists": [d.replace("sglang==0.5.23", "sglang==0.5.22") for d in DISTS]}),
    ("pth", CFG, _files(pth=None)),
    ("pth", CFG, _files(pth=WANT["pth"] | {"content": "/elsewhere\n"})),
    ("pth", CFG, _files(pth=WANT["pth"] | {"mode": "0600"})),
    ("pth", CFG, _files(pth=WANT["pth"] | {"owner": "nobody"})),
    ("sim_stack", CFG, {"dists": [d for d in DISTS if d != "x-y==2"]}),
    ("sim_stack", CFG, {"dists": [d for d in DISTS if d != "sglang==0.5.23"]}),
    ("stray_router", CFG, {"dists": [*DISTS, "sglang-router==0.3.2"]}),
    ("stray_router", PYPI, {"dists": [*DISTS, "smg==1.13.0"]}),
    ("wheel", CFG, {"wheel_ok": False}),
    ("wheel", CFG, _files(marker=None)),
    ("wheel", CFG, _files(marker=STATE | {"content": "c" * 64 + "\n"})),
    ("wheel", CFG, _files(marker=STATE | {"content": "a" * 64 + "\n", "group": "staff"})),
], ids=["debs", "debs-pypi", "pypi-sglang", "pypi-requirement", "pypi-version", "pth-missing", "pth-content",
        "pth-mode", "pth-owner", "sim-requirement", "sim-sglang", "router-left-sim", "router-left-pypi",
        "wheel-record", "wheel-no-marker",
        "wheel-marker-content", "wheel-marker-group"])
def test_each_entry_differs_alone_where_its_task_has_work(entry: str, cfg: dict, found: dict) -> None:
    assert SGLANG.differs(cfg, CONVERGED | found) == NONE | {entry: True}


def test_no_venv_differs_in_both_modes() -> None:
    """No venv: the role creates it (in pypi mode before it writes the hash lock into it and installs from it)."""
    bare = {"debs_missing": [], "purelib": "", "dists": [], "conn_sha256": "", "wheel_ok": False,
            "files": {RECORD: None, MARKER: None}}
    assert SGLANG.differs(CFG, bare) == dict.fromkeys(SGLANG.DIFFERS, True) | {"debs": False, "pypi_stack": False,
                                                                             "stray_router": False}
    assert SGLANG.differs(PYPI, bare) == NONE | {"venv": True, "pypi_stack": True}
    assert SGLANG.patch_differs(CFG, bare) == dict.fromkeys(SGLANG.PATCH, True)
    assert SGLANG.sim_missing(CFG, bare) == ["sglang==0.5.23", "foo-bar==1.0", "x-y==2"]
    assert SGLANG.sim_missing(PYPI, bare) == []


def test_the_sim_entries_are_off_in_pypi_mode_and_the_pypi_one_in_sim_mode() -> None:
    found = CONVERGED | _files(pth=None, marker=None) | {"dists": [], "wheel_ok": False}
    assert SGLANG.differs(PYPI, found) == NONE | {"pypi_stack": True}
    assert SGLANG.differs(CFG, found) == NONE | {"pth": True, "sim_stack": True, "wheel": True}


def test_pins_compare_as_the_probe_names_the_installed_distributions() -> None:
    """Names as pip spells them in a pin (upper case, "_" and ".") match dists_of's normalised ones; what is missing
    is named normalised (the pip task installs those)."""
    want = WANT | {"sim": ["SGLang==0.5.23", "foo.bar==1.0", "X_Y==2"]}
    assert SGLANG.differs(CFG | {"want": want}, CONVERGED) == NONE
    assert SGLANG.differs(PYPI | {"want": want | {"install_mode": "pypi", "pypi": ["SGLANG==0.5.23"]}},
                          CONVERGED) == NONE
    found = CONVERGED | {"dists": ["sglang==0.5.23"]}
    assert SGLANG.sim_missing(CFG | {"want": want}, found) == ["foo-bar==1.0", "x-y==2"]


@pytest.mark.parametrize(("entry", "found", "want"), [
    ("conn", {"conn_sha256": "c" * 64}, {}),  # a hand edit, another version, the pristine file while patching
    ("conn", {}, {"conn_sha256": "d" * 64}),  # sglang_apply_patch false: the pristine file is wanted
    ("record", _files(record=None), {}),
    ("record", {}, {"record": WANT["record"] | {"fields": FIELDS | {"patch_id": "nixl-guard-v1"}}}),
    ("record", {"purelib": "/opt/other/lib/python3.12/site-packages"}, {}),  # conn.py's path in the record
    ("record", _files(record=CONVERGED["files"][RECORD] | {"mode": "0640"}), {}),
], ids=["conn-hash", "conn-unpatched", "record-missing", "record-field", "record-file", "record-mode"])
def test_each_patch_entry_differs_alone(entry: str, found: dict, want: dict) -> None:
    cfg = CFG | {"want": WANT | want}
    assert SGLANG.patch_differs(cfg, CONVERGED | found) == NO_PATCH | {entry: True}


def test_conn_missing_when_conn_py_was_not_hashed() -> None:
    assert SGLANG.patch_differs(CFG, CONVERGED | {"conn_sha256": ""}) == {"conn_missing": True, "conn": True,
                                                                          "record": False}


def test_the_record_text_is_what_the_role_writes() -> None:
    """tasks/patch.yml writes the record with Ansible's to_nice_json(sort_keys=true) and a newline; the probe builds
    the same text to compare (the fields of a real patch, with and without it applied)."""
    for patched in (True, False):
        inputs = sglang_inputs("0.5.23", patched)
        patch = inputs["sglang_patch"]
        fields = {"version": inputs["sglang_version"], "patch_id": patch["patch_id"] if patched else "",
                  "patched": patched, "parts": patch["parts"] if patched else [],
                  "sha256": patch["patched_sha256" if patched else "pristine_sha256"], "install_mode": "pypi"}
        written = to_nice_json(fields | {"file": f"{PURELIB}/{patch['file']}"}, sort_keys=True) + "\n"
        assert SGLANG.record_content(fields, PURELIB, patch["file"]) == written


def test_settings_without_a_want_give_no_verdict(tmp_path: Path) -> None:
    """The entry point `python` sends no wanted state: the probe says nothing of what differs (no silent
    "nothing differs" that would skip every task)."""
    out = run_probe("sglang", {"venv": str(tmp_path / "none"), "python": sys.executable})
    assert "differs" not in out and "patch" not in out and "sim_missing" not in out


# The whole probe, run as a host runs it, against a venv in tmp_path.

def _fake_wheel(lib: Path, dist: str, text: str) -> None:
    """A distribution `dist` 1.0 in site-packages `lib` with one module, its RECORD naming the module's sha256."""
    (lib / f"{dist}-1.0.dist-info").mkdir(parents=True)
    (lib / dist).mkdir()
    (lib / dist / "a.py").write_text(text)
    h = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
    (lib / f"{dist}-1.0.dist-info" / "RECORD").write_text(f"{dist}/a.py,sha256={h},{len(text)}\n")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o644)


def _converged_host(tmp_path: Path) -> tuple[dict, Path]:
    """Settings (sim mode, this machine's user as the files' owner) and a venv that matches them in everything."""
    venv = tmp_path / "venv"
    lib = venv / "lib" / "python3.11" / "site-packages"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    for dist in ("sglang-0.5.23", "foo_bar-1.0", "x_y-2"):
        (lib / f"{dist}.dist-info").mkdir(parents=True)
    _fake_wheel(lib, "pdfleet", "x = 1\n")
    _fake_wheel(lib, "pdfleet_sim", "y = 1\n")
    _write(lib / CONN_FILE, "conn\n")
    state = {"mode": "0644", "owner": pwd.getpwuid(os.geteuid()).pw_name,
             "group": grp.getgrgid(os.getegid()).gr_name}
    record, marker = venv / "pdfleet-record.json", venv / "pdfleet-wheel.sha256"
    fields = FIELDS | {"sha256": hashlib.sha256(b"conn\n").hexdigest()}
    want = WANT | {"pth": state | {"content": "/opt/pdfleet-runtime/lib/python3.11/site-packages\n"},
                   "wheel_marker": state | {"path": str(marker), "content": "a" * 64 + "\n"},
                   "conn_sha256": fields["sha256"], "record": state | {"path": str(record), "fields": fields}}
    _write(lib / "pdfleet-runtime.pth", want["pth"]["content"])
    _write(marker, "a" * 64 + "\n")
    _write(record, SGLANG.record_content(fields, str(lib), CONN_FILE))
    cfg = {"venv": str(venv), "debs": ["coreutils"], "conn_file": CONN_FILE, "files": [str(record), str(marker)],
           "purelib_files": ["pdfleet-runtime.pth"], "wheel_dists": ["pdfleet", "pdfleet_sim"], "want": want}
    return cfg, lib


def test_the_whole_probe_finds_a_converged_host_converged(tmp_path: Path) -> None:
    cfg, lib = _converged_host(tmp_path)
    out = run_probe("sglang", cfg)
    assert set(out["differs"]) == set(SGLANG.DIFFERS) and set(out["patch"]) == set(SGLANG.PATCH)
    assert (out["differs"], out["patch"], out["sim_missing"]) == (NONE, NO_PATCH, []), out
    (lib / "sglang_router-0.3.2.dist-info").mkdir()  # the router where the bundle installed it before
    out = run_probe("sglang", cfg)
    assert (out["differs"], out["router_dists"]) == (NONE | {"stray_router": True}, ["sglang-router"])
    (lib / "sglang_router-0.3.2.dist-info").rmdir()
    (lib / "pdfleet_sim" / "a.py").write_text("y = 2\n")  # a hand edit of an installed sim wheel
    _write(lib / CONN_FILE, "edited\n")
    out = run_probe("sglang", cfg)
    assert (out["differs"], out["patch"]) == (NONE | {"wheel": True}, NO_PATCH | {"conn": True})


def test_the_whole_probe_finds_everything_to_do_on_a_bare_host(tmp_path: Path) -> None:
    cfg, _lib = _converged_host(tmp_path / "elsewhere")
    none = str(tmp_path / "none")
    bare = cfg | {"venv": none, "debs": ["coreutils", "pdfleet-no-such-package"], "files": [none + "/r", none + "/m"]}
    out = run_probe("sglang", bare)
    assert set(out["differs"]) == set(SGLANG.DIFFERS)
    assert out["differs"] == dict.fromkeys(SGLANG.DIFFERS, True) | {"pypi_stack": False, "stray_router": False}
    assert out["patch"] == dict.fromkeys(SGLANG.PATCH, True)
    assert out["sim_missing"] == ["sglang==0.5.23", "foo-bar==1.0", "x-y==2"]
    pypi = run_probe("sglang", bare | {"want": bare["want"] | {"install_mode": "pypi"}})
    assert pypi["differs"] == NONE | {"debs": True, "venv": True, "pypi_stack": True} and pypi["sim_missing"] == []


# The gateway's venv against its hash lock (probe.router): the shipped smg lock itself, the venv in tmp_path.

GATEWAY_LOCK = ROLES / "sglang" / "files" / "gateway" / "smg-1.13.0.lock"


def _gateway(tmp_path: Path, python: str = "3.11", source: Path = GATEWAY_LOCK, name: str = "gateway",
             lock_name: str = "pdfleet-gateway.lock") -> tuple[dict, Path]:
    """Settings for a venv at tmp_path/<name> with every requirement of the shipped lock ``source`` for ``python``
    installed and the lock file written as the role writes it; the venv's site-packages."""
    venv = tmp_path / name
    lib = venv / "lib" / f"python{python}" / "site-packages"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    text = source.read_text()
    for pin in COMMON.lock_missing(text, python, set()):
        dist, _sep, version = pin.partition("==")
        (lib / f"{dist.replace('-', '_')}-{version}.dist-info").mkdir(parents=True)
    state = {"mode": "0644", "owner": pwd.getpwuid(os.geteuid()).pw_name, "group": grp.getgrgid(os.getegid()).gr_name}
    lock = venv / lock_name
    _write(lock, text)
    return {"venv": str(venv), "lock": state | {"path": str(lock), "content": text}}, lib


def test_the_lock_requirements_of_a_python_are_those_without_a_marker_or_with_its_own() -> None:
    text = ("# From: a==1\n"
            "a==1 \\\n    --hash=sha256:" + "a" * 64 + "\n"
            'b==2 ; python_version == "3.10" \\\n    --hash=sha256:' + "b" * 64 + "\n"
            'B_c==3 ; python_version == "3.11" or python_version == "3.12" \\\n    --hash=sha256:' + "c" * 64 + "\n")
    assert COMMON.lock_missing(text, "3.10", set()) == ["a==1", "b==2"]
    assert COMMON.lock_missing(text, "3.11", set()) == ["a==1", "b-c==3"]
    assert COMMON.lock_missing(text, "3.12", {"b-c==3"}) == ["a==1"]
    assert COMMON.lock_missing(text, "3.11", {"a==1", "b-c==3", "b==2"}) == []
    # a requirement pinned with the extras a dependant asks for (pip's hash-checking mode needs them) is the
    # distribution itself once installed
    extras = text + "".join(f"{r}==1.7.0 \\\n    --hash=sha256:" + "d" * 64 + "\n"
                            for r in ("cuda-tile", "cuda-tile[tileiras]"))
    assert COMMON.lock_missing(extras, "3.12", {"a==1", "b-c==3"}) == ["cuda-tile==1.7.0"]
    assert COMMON.lock_missing(extras, "3.12", {"a==1", "b-c==3", "cuda-tile==1.7.0"}) == []


def test_a_router_venv_that_matches_its_lock_differs_in_nothing(tmp_path: Path) -> None:
    router, _lib = _gateway(tmp_path)
    cfg, _ = _converged_host(tmp_path / "service")
    out = run_probe("sglang", cfg | {"router": router})
    assert out["router"] == {"python": "3.11", "missing": [], "differs": False}, out["router"]
    assert run_probe("sglang", cfg)["router"] is None  # not the router host


def test_a_router_venv_differs_without_a_locked_package_the_lock_file_or_the_venv(tmp_path: Path) -> None:
    router, lib = _gateway(tmp_path)
    cfg, _ = _converged_host(tmp_path / "service")
    (lib / "grpcio-1.85.3.dist-info").rename(lib / "grpcio-1.86.0.dist-info")  # a dependency that floated
    out = run_probe("sglang", cfg | {"router": router})["router"]
    assert out == {"python": "3.11", "missing": ["grpcio==1.85.3"], "differs": True}, out
    (lib / "grpcio-1.86.0.dist-info").rename(lib / "grpcio-1.85.3.dist-info")
    Path(router["lock"]["path"]).write_text("# an older lock\n")
    assert run_probe("sglang", cfg | {"router": router})["router"]["differs"] is True
    out = run_probe("sglang", cfg | {"router": router | {"venv": str(tmp_path / "none")}})["router"]
    assert out == {"python": "", "missing": [], "differs": True}, out


# The service venv against its hash lock in pypi mode (probe.service): the shipped lock of SGLang 0.5.23 itself.

SERVICE_LOCK = ROLES / "sglang" / "files" / "service" / "sglang-0.5.23.lock"


def _pypi_host(tmp_path: Path, python: str = "3.11") -> tuple[dict, Path]:
    service, lib = _gateway(tmp_path, python, SERVICE_LOCK, "venv", "pdfleet-service.lock")
    want = WANT | {"install_mode": "pypi", "pypi": ["sglang==0.5.23"]}
    return {"venv": service["venv"], "conn_file": CONN_FILE, "want": want, "service": service}, lib


@pytest.mark.parametrize("python", ["3.11", "3.12"])
def test_a_service_venv_that_matches_its_lock_has_no_stack_to_install(tmp_path: Path, python: str) -> None:
    cfg, _lib = _pypi_host(tmp_path, python)
    out = run_probe("sglang", cfg)
    assert out["service"] == {"python": python, "missing": [], "differs": False}, out["service"]
    assert out["differs"]["pypi_stack"] is False and out["differs"]["venv"] is False
    assert run_probe("sglang", cfg | {"service": None})["service"] is None  # sim mode sends none


def test_a_service_venv_differs_without_a_locked_package_or_its_lock_file(tmp_path: Path) -> None:
    """A dependency at another version (pip install by hand, or another package's install floating it), the lock
    file changed (a new lock shipped) or gone: the stack is installed from the lock again."""
    cfg, lib = _pypi_host(tmp_path)
    torch = next(lib.glob("torch-*.dist-info"))
    torch.rename(lib / "torch-2.11.0.dist-info")  # what an unlocked install of another package left
    out = run_probe("sglang", cfg)
    assert out["service"]["missing"] == [f"torch=={torch.name[6:-10]}"] and out["differs"]["pypi_stack"], out
    (lib / "torch-2.11.0.dist-info").rename(torch)
    assert run_probe("sglang", cfg)["differs"]["pypi_stack"] is False
    Path(cfg["service"]["lock"]["path"]).write_text("# an older lock\n")
    assert run_probe("sglang", cfg)["differs"]["pypi_stack"] is True
    Path(cfg["service"]["lock"]["path"]).unlink()
    assert run_probe("sglang", cfg)["differs"]["pypi_stack"] is True
