"""The model role against localhost (connection: local), writing only into a tmp dir: a small generated
mirror is staged and verified, a second run changes nothing, check mode is clean, a truncated staged file is
re-staged, a same-size corruption fails clearly (with model_verify_checksums), and bad inputs fail clearly."""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pdfleet import weights as mm
from pdfleet.paths import REPO_ROOT
from role_inputs import plan_inputs

BIN = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin"
PLAYBOOK = Path(__file__).parent / "stage.yml"
OWNER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


def run_role(model_path: Path, *args: str, check: bool = False, **extra: object) -> tuple[int, int, str]:
    """Run the role; return (rc, changed count, output)."""
    evars = {
        **plan_inputs("model"),
        "ansible_python_interpreter": sys.executable,
        "model_path": str(model_path),
        "model_owner": OWNER,
        "model_group": GROUP,
        "model_source": "standin",
        **extra,
    }
    cmd = [str(BIN / "ansible-playbook"), str(PLAYBOOK), "-i", "localhost,", "-e", json.dumps(evars), *args]
    if check:
        cmd += ["--check", "--diff"]
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOCALHOST_WARNING": "0"}
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False, env=env)
    out = proc.stdout + proc.stderr
    m = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", out)
    return proc.returncode, int(m.group(1)) if m else -1, out


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("mirror")
    (d / "sub").mkdir()
    (d / "config.json").write_text('{"model_type": "test"}\n')
    for i in range(3):
        (d / f"model-0000{i + 1}-of-00003.safetensors").write_bytes(os.urandom(1024 * 1024) + bytes([i]))
    (d / "sub" / "tokenizer.json").write_text("{}\n")
    mm.write(d, mm.build(d))
    return d


@pytest.fixture(scope="module")
def staged(mirror: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, str]]:
    dest = tmp_path_factory.mktemp("host") / "models" / "M"
    rc, changed, out = run_role(dest, model_source="mirror", model_mirror_path=str(mirror))
    assert rc == 0, out
    yield dest, changed, out


def test_mirror_is_staged_and_verified(staged: tuple[Path, int, str]) -> None:
    dest, changed, _ = staged
    assert changed > 0
    assert (dest / mm.MANIFEST_NAME).is_file()
    assert mm.check(dest, full=True).ok


def test_second_run_changes_nothing(mirror: Path, staged: tuple[Path, int, str]) -> None:
    rc, changed, out = run_role(staged[0], model_source="mirror", model_mirror_path=str(mirror))
    assert rc == 0, out
    assert changed == 0, out
    assert "nothing to stage" in out


def test_check_mode_on_a_staged_copy_is_clean(mirror: Path, staged: tuple[Path, int, str]) -> None:
    rc, changed, out = run_role(staged[0], check=True, model_source="mirror", model_mirror_path=str(mirror))
    assert rc == 0, out
    assert changed == 0, out


def test_check_mode_on_an_empty_host_writes_nothing(mirror: Path, tmp_path: Path) -> None:
    dest = tmp_path / "fresh"
    rc, changed, out = run_role(dest, check=True, model_source="mirror", model_mirror_path=str(mirror))
    assert rc == 0, out
    assert changed > 0, out
    assert not dest.exists()


def test_truncated_staged_file_is_restaged(mirror: Path, tmp_path: Path) -> None:
    dest = tmp_path / "M"
    assert run_role(dest, model_source="mirror", model_mirror_path=str(mirror))[0] == 0
    blob = dest / "model-00002-of-00003.safetensors"
    blob.write_bytes(blob.read_bytes()[:1000])
    rc, changed, out = run_role(dest, model_source="mirror", model_mirror_path=str(mirror))
    assert rc == 0, out
    assert changed == 1, out  # that one file, nothing else
    assert "to stage: model-00002-of-00003.safetensors" in out
    assert mm.check(dest, full=True).ok


def test_same_size_corruption_fails_clearly_with_checksums(mirror: Path, tmp_path: Path) -> None:
    dest = tmp_path / "M"
    assert run_role(dest, model_source="mirror", model_mirror_path=str(mirror))[0] == 0
    blob = dest / "model-00003-of-00003.safetensors"
    data = bytearray(blob.read_bytes())
    data[10] ^= 0xFF
    blob.write_bytes(bytes(data))
    rc, _, out = run_role(dest, model_source="mirror", model_mirror_path=str(mirror), model_verify_checksums=True)
    assert rc != 0
    assert "host localhost" in out
    assert "model-00003-of-00003.safetensors has sha256" in out
    assert f"Fix: delete {dest}/model-00003-of-00003.safetensors" in out


def test_mirror_without_manifest_fails_clearly(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "x.bin").write_bytes(b"x")
    rc, _, out = run_role(tmp_path / "M", model_source="mirror", model_mirror_path=str(bare))
    assert rc != 0
    assert "no model manifest" in out and "pdfleet.weights build" in out


@pytest.mark.parametrize("escape", ["../outside.bin", "/etc/outside.bin", "sub/../../outside.bin"])
def test_a_manifest_path_leaving_the_model_directory_is_refused(mirror: Path, tmp_path: Path, escape: str) -> None:
    """The role copies as root: a manifest naming a path outside the model directory stops it before any copy
    (the model directory itself, made before the manifest is read, stays empty)."""
    evil = tmp_path / "evil"
    shutil.copytree(mirror, evil)
    manifest = json.loads((evil / mm.MANIFEST_NAME).read_text())
    manifest["files"].append({**manifest["files"][0], "path": escape})
    (evil / mm.MANIFEST_NAME).write_text(json.dumps(manifest))
    rc, _, out = run_role(tmp_path / "host" / "M", model_source="mirror", model_mirror_path=str(evil))
    assert rc != 0, out
    assert f"names paths outside the model directory: {escape}" in " ".join(out.split())
    assert not any((tmp_path / "host").rglob("*.*")), list((tmp_path / "host").rglob("*"))
    assert not (tmp_path / "outside.bin").exists() and not (tmp_path / "host" / "outside.bin").exists()


def test_mirror_without_path_fails_clearly(tmp_path: Path) -> None:
    rc, _, out = run_role(tmp_path / "M", model_source="mirror")
    assert rc != 0
    assert "model_mirror_path" in out
    assert not (tmp_path / "M").exists()


def test_hub_without_token_fails_before_changing_anything(tmp_path: Path) -> None:
    rc, _, out = run_role(tmp_path / "M", model_source="hub")
    assert rc != 0
    assert "model_hf_token" in out and "Vault" in out
    assert not (tmp_path / "M").exists()


def test_standin_is_unchanged(tmp_path: Path) -> None:
    dest = tmp_path / "S"
    rc, changed, out = run_role(dest)
    assert rc == 0, out
    assert changed > 0
    assert sorted(p.name for p in dest.iterdir()) == [
        "README.md",
        "config.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    rc, changed, out = run_role(dest)
    assert (rc, changed) == (0, 0), out
