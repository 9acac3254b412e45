"""The patch series itself: manifests match the wheels, GNU patch applies them, errors are actionable."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pdfleet.patch import manifest as patches
from pdfleet.patch.apply import apply_to_copy, extract_from_wheel, sha256_file
from pdfleet.patch.errors import PatchError, UnsupportedVersionError

VERSIONS = patches.supported_versions()


def test_supported_versions_are_the_two_known_ones() -> None:
    assert VERSIONS == ["0.5.15.post1", "0.5.23"]


@pytest.mark.parametrize("version", VERSIONS)
def test_manifest_hashes_match_the_wheel_and_the_patch(version: str, wheels: dict[str, Path],
                                                       tmp_path: Path) -> None:
    manifest = patches.load_manifest(version)
    pristine = extract_from_wheel(wheels[version], manifest.file, tmp_path / "pristine.py")
    assert sha256_file(pristine) == manifest.pristine_sha256
    before = pristine.read_bytes()
    apply_to_copy(version, pristine, tmp_path / "patched.py")
    assert sha256_file(tmp_path / "patched.py") == manifest.patched_sha256
    assert pristine.read_bytes() == before, "apply_to_copy must not touch the pristine file"


def test_manifests_describe_the_parts_per_version() -> None:
    old, new = patches.load_manifest("0.5.15.post1"), patches.load_manifest("0.5.23")
    assert (old.parts, old.upstream_parts) == ((1, 2, 3), ())
    assert (new.parts, new.upstream_parts) == ((3,), (1, 2))
    assert old.patch_id != new.patch_id
    assert {old.file, new.file} == {"sglang/srt/disaggregation/nixl/conn.py"}


@pytest.mark.parametrize("version", VERSIONS)
def test_patch_has_minimal_context_and_makes_the_guard_non_fatal(version: str) -> None:
    text = patches.load_manifest(version).patch_path.read_text()
    assert "unexpected leading frame" in text
    assert "-                assert" in text  # the fatal GUARD assertion is removed
    hunks = [h for h in text.split("\n@@ ")[1:]]
    for hunk in hunks:
        lines = hunk.splitlines()[1:]
        leading = next(i for i, line in enumerate(lines) if line[:1] in "+-")
        assert leading <= 2, "patches carry at most 2 lines of upstream context"


def test_unsupported_version_lists_the_supported_ones(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedVersionError) as err:
        apply_to_copy("0.5.14", tmp_path / "conn.py", tmp_path / "out.py")
    assert "0.5.15.post1, 0.5.23" in str(err.value)
    assert err.value.exit_code == 2


def test_a_file_that_is_not_the_pristine_one_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "conn.py"
    other.write_text("print('not sglang')\n")
    with pytest.raises(PatchError, match="is not the pristine"):
        apply_to_copy("0.5.23", other, tmp_path / "out.py")
    assert not (tmp_path / "out.py").exists()


def test_a_manifest_in_the_wrong_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "9.9.9"
    folder.mkdir()
    (folder / patches.PATCH_FILE).write_text("")
    (folder / patches.MANIFEST_FILE).write_text(
        "version: '1.0'\npatch_id: x\nfile: f\npristine_sha256: a\npatched_sha256: b\nparts: [3]\n"
        "upstream: {parts: [], note: ''}\n"
    )
    with pytest.raises(PatchError, match="lives in folder"):
        patches.load_manifest("9.9.9", tmp_path)
    assert patches.supported_versions(tmp_path) == ["9.9.9"]


SUPERSEDED = Path(__file__).parent / "superseded"


@pytest.mark.parametrize("version", VERSIONS)
def test_superseded_hashes_are_the_earlier_patches_applied_to_the_wheel(version: str, wheels: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    """The sglang role puts conn.py back when it hashes to a superseded entry: each entry must be exactly what the
    earlier patch (kept under tests/sglang/superseded only to prove this) made of the wheel's file, and never the
    current patched or pristine hash (those must not be reinstalled)."""
    manifest = patches.load_manifest(version)
    assert manifest.superseded, f"{version}: the manifest names no earlier patch"
    pristine = extract_from_wheel(wheels[version], manifest.file, tmp_path / "conn.py")
    for patch_id, sha in manifest.superseded.items():
        assert patch_id != manifest.patch_id
        assert sha not in (manifest.patched_sha256, manifest.pristine_sha256)
        old = tmp_path / f"{patch_id}.py"
        old.write_bytes(pristine.read_bytes())
        patch_file = SUPERSEDED / version / f"{patch_id}.patch"
        proc = subprocess.run(["patch", "--batch", "--forward", "--fuzz=0", "--silent", str(old), str(patch_file)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert sha256_file(old) == sha, f"{version} {patch_id}: the manifest's superseded hash is wrong"


def test_a_malformed_superseded_entry_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "0.5.23"
    folder.mkdir()
    text = (patches.default_patches_dir() / "0.5.23" / "manifest.yml").read_text()
    (folder / "manifest.yml").write_text(text.replace("patched_sha256: 5349", "patched_sha256: zz49"))
    (folder / "nixl-conn.patch").write_text("")
    with pytest.raises(PatchError, match=r"superseded entry .* needs a patch_id and a 64-hex"):
        patches.load_manifest("0.5.23", tmp_path)
