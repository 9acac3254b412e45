"""The nixl role's "differs" (files/probe.py: differs), decided on the host from the wanted state in the probe's
settings: each entry is true where its task of tasks/apply.yml has something to put back, false on a converged host
(so a second run changes nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_plugins.probes import load_probe, run_probe

NIXL = load_probe("nixl")
WANT = {"install_mode": "sim", "backend": "nixl-cu12==0.7.1", "meta": "nixl==0.7.1"}
CFG = {"packages": ["ucx", "ucx-cuda", "python3-venv"], "want": WANT}
CONVERGED = {"packages": ["python3-venv", "ucx", "ucx-cuda"], "venv": True,
             "dists": ["nixl-cu12==0.7.1", "nixl==0.7.1", "pip==24.0"]}


def test_a_converged_host_differs_in_nothing() -> None:
    assert NIXL.differs(CFG, CONVERGED) == dict.fromkeys(NIXL.DIFFERS, False)
    assert NIXL.differs(CFG | {"want": WANT | {"install_mode": "pypi"}}, CONVERGED) == dict.fromkeys(NIXL.DIFFERS,
                                                                                                    False)


@pytest.mark.parametrize(("entry", "found", "want"), [
    ("packages", {"packages": ["python3-venv", "ucx"]}, {}),  # ucx-cuda missing
    ("packages", {"packages": []}, {}),
    ("venv", {"venv": False}, {}),
    ("backend", {"dists": ["nixl==0.7.1"]}, {}),  # sim mode without the stand-in backend
    ("backend", {"dists": ["nixl-cu12==0.7.0", "nixl==0.7.1"]}, {}),  # another version
    ("meta", {"dists": ["nixl-cu12==0.7.1"]}, {}),
    ("meta", {"dists": ["nixl-cu12==0.7.1", "nixl==0.7.0"]}, {}),
    ("meta", {"dists": ["nixl-cu12==0.7.1", "nixl==0.7.1"]}, {"meta": "nixl==0.8.0"}),  # a new pin
], ids=["packages-one", "packages-none", "venv", "backend-missing", "backend-version", "meta-missing",
        "meta-version", "meta-new-pin"])
def test_each_entry_differs_alone_where_its_task_has_work(entry: str, found: dict, want: dict) -> None:
    out = NIXL.differs(CFG | {"want": WANT | want}, CONVERGED | found)
    assert out == dict.fromkeys(NIXL.DIFFERS, False) | {entry: True}


def test_the_backend_is_wanted_in_sim_mode_only() -> None:
    found = CONVERGED | {"dists": ["nixl==0.7.1"]}
    assert NIXL.differs(CFG, found)["backend"] is True
    assert NIXL.differs(CFG | {"want": WANT | {"install_mode": "pypi"}}, found)["backend"] is False


def test_pins_compare_as_the_probe_names_the_installed_distributions() -> None:
    """dists_of lower-cases and normalises names (PEP 503): a pin spelled otherwise still matches."""
    want = WANT | {"backend": "NIXL_cu12==0.7.1", "meta": "Nixl==0.7.1"}
    assert NIXL.differs(CFG | {"want": want}, CONVERGED) == dict.fromkeys(NIXL.DIFFERS, False)


def test_settings_without_a_want_give_no_verdict(tmp_path: Path) -> None:
    out = run_probe("nixl", {"venv": str(tmp_path / "none"), "ucx_info": "/nonexistent/ucx_info",
                             "nvidia_smi": "/nonexistent/nvidia-smi", "packages": [], "gpu_peer_modes": []})
    assert "differs" not in out


def _venv(root: Path, dists: list[str]) -> Path:
    venv = root / "venv"
    lib = venv / "lib" / "python3.11" / "site-packages"
    lib.mkdir(parents=True)
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text("")
    for dist in dists:
        (lib / f"{dist}.dist-info").mkdir()
    return venv


def test_the_whole_probe_reports_differs_from_what_it_finds(tmp_path: Path) -> None:
    """Run as a host runs it: a bare host differs in every entry; a converged one in none (this machine's dpkg has
    coreutils installed, not the stand-in package name)."""
    none = str(tmp_path / "none")
    bare = {"venv": none, "ucx_info": none, "packages": ["coreutils", "pdfleet-no-such-package"], "want": WANT}
    out = run_probe("nixl", bare)
    assert set(out["differs"]) == set(NIXL.DIFFERS)
    assert out["differs"] == dict.fromkeys(NIXL.DIFFERS, True)
    venv = _venv(tmp_path, ["nixl-0.7.1", "nixl_cu12-0.7.1"])
    converged = run_probe("nixl", bare | {"venv": str(venv), "packages": ["coreutils"]})
    assert converged["differs"] == dict.fromkeys(NIXL.DIFFERS, False), converged
    assert converged["dists"] == ["nixl-cu12==0.7.1", "nixl==0.7.1"]


# pypi mode: the service venv against its hash lock (the shipped lock of SGLang 0.5.23, resolved with the NIXL pin).

SERVICE_LOCK = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "sglang" / "files" / "service" \
    / "sglang-0.5.23.lock"


def _locked_host(tmp_path: Path) -> tuple[dict, Path]:
    """pypi settings with the lock, and a venv holding every requirement of it for Python 3.11 and the lock file
    written as the role writes it (this machine's user as its owner)."""
    import grp
    import os
    import pwd

    from ansible_plugins.probes import load_common

    text = SERVICE_LOCK.read_text()
    venv = tmp_path / "venv"
    lib = venv / "lib" / "python3.11" / "site-packages"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    for pin in load_common().lock_missing(text, "3.11", set()):
        name, _sep, version = pin.partition("==")
        (lib / f"{name.replace('-', '_')}-{version}.dist-info").mkdir(parents=True)
    lock = venv / "pdfleet-service.lock"
    lock.write_text(text)
    lock.chmod(0o644)
    state = {"path": str(lock), "content": text, "mode": "0644", "owner": pwd.getpwuid(os.geteuid()).pw_name,
             "group": grp.getgrgid(os.getegid()).gr_name}
    nixl = next(line.split(" ")[0] for line in text.splitlines() if line.startswith("nixl=="))
    cfg = {"venv": str(venv), "ucx_info": "/nonexistent", "nvidia_smi": "/nonexistent", "packages": [],
           "want": WANT | {"install_mode": "pypi", "meta": nixl}, "lock": {"venv": str(venv), "lock": state}}
    return cfg, lib


def test_pypi_mode_installs_nothing_on_a_venv_that_matches_the_service_lock(tmp_path: Path) -> None:
    cfg, _lib = _locked_host(tmp_path)
    out = run_probe("nixl", cfg)
    assert out["lock"] == {"python": "3.11", "missing": [], "differs": False}, out["lock"]
    assert out["differs"] == dict.fromkeys(NIXL.DIFFERS, False), out["differs"]


def test_pypi_mode_installs_from_the_lock_again_when_the_venv_or_the_lock_file_differs(tmp_path: Path) -> None:
    """torch floated by another install, or a new lock shipped: "meta" (the locked install) has work; in sim mode
    there is no lock to compare."""
    cfg, lib = _locked_host(tmp_path)
    torch = next(lib.glob("torch-*.dist-info"))
    torch.rename(lib / "torch-2.11.0.dist-info")
    out = run_probe("nixl", cfg)
    assert out["lock"]["missing"] == [f"torch=={torch.name[6:-10]}"], out["lock"]
    assert out["differs"] == dict.fromkeys(NIXL.DIFFERS, False) | {"meta": True}
    (lib / "torch-2.11.0.dist-info").rename(torch)
    Path(cfg["lock"]["lock"]["path"]).write_text("# an older lock\n")
    assert run_probe("nixl", cfg)["differs"]["meta"] is True
    assert run_probe("nixl", cfg | {"lock": None})["lock"] is None
