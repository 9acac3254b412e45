"""The model probe decides what differs (files/probe.py: differs) from the wanted state in its settings: each entry
is true on a host that differs and false on a converged one, as the Jinja in vars/main.yml it replaced was."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT

from ansible_plugins.probes import load_probe, run_probe

STANDIN = REPO_ROOT / "ansible" / "roles" / "model" / "files" / "standin"
DIR = {"mode": "0755", "owner": "pdfleet", "group": "pdfleet"}
FILES = {"config.json": "a" * 64, "tokenizer.json": "b" * 64}


@pytest.fixture(scope="module")
def probe():
    return load_probe("model")


def _want(standin: bool = True, owner: str = "pdfleet", group: str = "pdfleet") -> dict:
    return {"want": {"dir": {"mode": "0755", "owner": owner, "group": group},
                     "standin": {"files": dict(FILES), "mode": "0644", "owner": owner, "group": group}
                     if standin else None}}


def _found(changes: dict | None = None) -> dict:
    """A converged stand-in's directory, with ``changes`` (name: state, None for a missing file) over it."""
    states = {name: {"sha256": sha, "mode": "0644", "owner": "pdfleet", "group": "pdfleet"}
              for name, sha in FILES.items()}
    for name, state in (changes or {}).items():
        if state is None:
            del states[name]
        else:
            states[name] = state
    return {"dir": dict(DIR), "files": states}


def test_a_converged_host_differs_in_nothing(probe) -> None:
    out = probe.differs(_want(), _found())
    assert out == {"dir": False, "standin": False}
    assert set(out) == set(probe.DIFFERS)
    # a file the stand-in does not have is left alone
    extra = {"sha256": "c" * 64, "mode": "0600", "owner": "root", "group": "root"}
    assert probe.differs(_want(), _found({"weights.bin": extra})) == {"dir": False, "standin": False}


def test_dir_differs_when_missing_or_not_as_wanted(probe) -> None:
    assert probe.differs(_want(), {"dir": None, "files": {}})["dir"] is True
    for key, value in (("mode", "0700"), ("owner", "root"), ("group", "root")):
        assert probe.differs(_want(), {**_found(), "dir": {**DIR, key: value}})["dir"] is True, key
    # the directory is wanted whatever the source
    assert probe.differs(_want(standin=False), {"dir": None, "files": {}})["dir"] is True
    assert probe.differs(_want(standin=False), {"dir": dict(DIR), "files": {}})["dir"] is False


def test_standin_differs_when_a_file_is_missing_or_changed(probe) -> None:
    assert probe.differs(_want(), {"dir": None, "files": {}})["standin"] is True
    assert probe.differs(_want(), _found({"config.json": None}))["standin"] is True
    good = {"sha256": "a" * 64, "mode": "0644", "owner": "pdfleet", "group": "pdfleet"}
    for key, value in (("sha256", "d" * 64), ("mode", "0600"), ("owner", "root"), ("group", "root")):
        assert probe.differs(_want(), _found({"config.json": {**good, key: value}}))["standin"] is True, key


def test_standin_never_differs_for_another_source(probe) -> None:
    """A mirror or hub source stages its own files (the manifest decides): the stand-in's entry stays false."""
    assert probe.differs(_want(standin=False), {"dir": dict(DIR), "files": {}})["standin"] is False
    assert probe.differs(_want(standin=False), {"dir": None, "files": {}})["standin"] is False


def _whole_want(owner: str, group: str) -> dict:
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(STANDIN.iterdir())}
    return {"dir": {"mode": "0755", "owner": owner, "group": group},
            "standin": {"files": files, "mode": "0644", "owner": owner, "group": group}}


def test_a_whole_run_prints_differs_from_what_it_found(tmp_path: Path, probe) -> None:
    model = tmp_path / "model"
    owner, group = probe.owner_group(os.stat(tmp_path))
    settings = {"path": str(model), "files": True, "want": _whole_want(owner, group)}
    out = run_probe("model", settings)
    assert set(out["differs"]) == set(probe.DIFFERS)
    assert out["differs"] == {"dir": True, "standin": True}
    shutil.copytree(STANDIN, model)
    model.chmod(0o755)
    for f in model.iterdir():
        f.chmod(0o644)
    (model / "weights.bin").write_bytes(b"\0")  # not the stand-in's: left alone
    out = run_probe("model", settings)
    assert out["differs"] == {"dir": False, "standin": False}
    assert out["files"]["config.json"] == {"sha256": settings["want"]["standin"]["files"]["config.json"],
                                           "mode": "0644", "owner": owner, "group": group}
    (model / "tokenizer.json").write_text("{}\n")
    assert run_probe("model", settings)["differs"] == {"dir": False, "standin": True}
    (model / "tokenizer.json").unlink()
    assert run_probe("model", settings)["differs"] == {"dir": False, "standin": True}
    model.chmod(0o700)
    # another source: the files are not read, only the directory counts
    other = {"path": str(model), "files": False, "want": {**settings["want"], "standin": None}}
    assert run_probe("model", other) == {"dir": {"mode": "0700", "owner": owner, "group": group}, "files": {},
                                         "differs": {"dir": True, "standin": False}}
