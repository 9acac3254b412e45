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
