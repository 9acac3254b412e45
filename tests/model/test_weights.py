"""Unit tests of pdfleet.weights: build, check, and the damage check must catch."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from pdfleet import weights as mm


@pytest.fixture
def mirror(tmp_path: Path) -> Path:
    d = tmp_path / "mirror"
    (d / "sub").mkdir(parents=True)
    (d / "config.json").write_text('{"a": 1}\n')
    (d / "model-00001.safetensors").write_bytes(bytes(range(256)) * 4096)
    (d / "sub" / "tokenizer.json").write_text("{}\n")
    return d


def test_build_lists_every_file_with_size_and_sha256(mirror: Path) -> None:
    out = mm.write(mirror, mm.build(mirror))
    doc = json.loads(out.read_text())
    assert doc["version"] == 1
    by_path = {f["path"]: f for f in doc["files"]}
    assert sorted(by_path) == ["config.json", "model-00001.safetensors", "sub/tokenizer.json"]
    blob = (mirror / "model-00001.safetensors").read_bytes()
    assert by_path["model-00001.safetensors"] == {
        "path": "model-00001.safetensors",
        "size": len(blob),
        "sha256": hashlib.sha256(blob).hexdigest(),
    }


def test_rebuild_does_not_list_the_manifest_itself(mirror: Path) -> None:
    mm.write(mirror, mm.build(mirror))
    assert mm.MANIFEST_NAME not in {e.path for e in mm.build(mirror)}


def test_check_passes_on_an_intact_copy(mirror: Path) -> None:
    mm.write(mirror, mm.build(mirror))
    assert mm.check(mirror).ok
    assert mm.check(mirror, full=True).ok
    assert mm.main(["check", str(mirror), "--full"]) == 0


def test_truncated_file_is_caught_by_the_size_check(mirror: Path) -> None:
    mm.write(mirror, mm.build(mirror))
    blob = mirror / "model-00001.safetensors"
    blob.write_bytes(blob.read_bytes()[:-1])
    result = mm.check(mirror)
    assert [(m.path, m.problem) for m in result.failures] == [("model-00001.safetensors", "size")]
    assert mm.main(["check", str(mirror)]) == 1


def test_changed_byte_is_caught_only_by_the_full_check(mirror: Path) -> None:
    mm.write(mirror, mm.build(mirror))
    blob = mirror / "model-00001.safetensors"
    data = bytearray(blob.read_bytes())
    data[1000] ^= 0xFF
    blob.write_bytes(bytes(data))
    assert mm.check(mirror).ok  # same size
    result = mm.check(mirror, full=True)
    assert [(m.path, m.problem) for m in result.failures] == [("model-00001.safetensors", "sha256")]
    assert mm.main(["check", str(mirror), "--full"]) == 1


def test_missing_file_is_caught(mirror: Path, capsys: pytest.CaptureFixture[str]) -> None:
    mm.write(mirror, mm.build(mirror))
    (mirror / "sub" / "tokenizer.json").unlink()
    assert mm.main(["check", str(mirror), "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict["ok"] is False
    assert verdict["failures"][0]["path"] == "sub/tokenizer.json"
    assert verdict["failures"][0]["problem"] == "missing"


def test_check_against_a_separate_manifest(mirror: Path, tmp_path: Path) -> None:
    mm.write(mirror, mm.build(mirror))
    copy = tmp_path / "copy"
    copy.mkdir()
    assert mm.main(["check", str(copy), "--manifest", str(mirror / mm.MANIFEST_NAME)]) == 1


def test_no_manifest_is_exit_2(mirror: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert mm.main(["check", str(mirror)]) == 2
    assert "pdfleet.weights build" in capsys.readouterr().err


def test_not_a_directory_is_exit_2(tmp_path: Path) -> None:
    assert mm.main(["build", str(tmp_path / "nope")]) == 2


def test_unsafe_manifest_path_is_refused(mirror: Path) -> None:
    (mirror / mm.MANIFEST_NAME).write_text(
        json.dumps({"version": 1, "files": [{"path": "../etc/passwd", "size": 1, "sha256": "x"}]})
    )
    with pytest.raises(mm.ManifestError, match="unsafe path"):
        mm.load(mirror / mm.MANIFEST_NAME)
