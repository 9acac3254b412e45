"""The patch series itself: manifests match the wheels, GNU patch applies them, errors are actionable."""

from __future__ import annotations

from pathlib import Path

import pytest
from pdfleet.patch import manifest as patches

VERSIONS = patches.supported_versions()


def test_supported_versions_are_the_two_known_ones() -> None:
    assert VERSIONS == ["0.5.15.post1", "0.5.23"]


@pytest.mark.parametrize("version", VERSIONS)
def test_manifest_hashes_match_the_wheel_and_the_patch(version: str, wheels: dict[str, Path],
                                                       tmp_path: Path) -> None:
    manifest = patches.load_manifest(version)
    pristine = patches.extract_from_wheel(wheels[version], manifest.file, tmp_path / "pristine.py")
    assert patches.sha256_file(pristine) == manifest.pristine_sha256
    before = pristine.read_bytes()
    patches.apply_to_copy(version, pristine, tmp_path / "patched.py")
    assert patches.sha256_file(tmp_path / "patched.py") == manifest.patched_sha256
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
    with pytest.raises(patches.UnsupportedVersionError) as err:
        patches.apply_to_copy("0.5.14", tmp_path / "conn.py", tmp_path / "out.py")
    assert "0.5.15.post1, 0.5.23" in str(err.value)
    assert err.value.exit_code == 2


def test_a_file_that_is_not_the_pristine_one_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "conn.py"
    other.write_text("print('not sglang')\n")
    with pytest.raises(patches.PatchError, match="is not the pristine"):
        patches.apply_to_copy("0.5.23", other, tmp_path / "out.py")
    assert not (tmp_path / "out.py").exists()


def test_a_manifest_in_the_wrong_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "9.9.9"
    folder.mkdir()
    (folder / patches.PATCH_FILE).write_text("")
    (folder / patches.MANIFEST_FILE).write_text(
        "version: '1.0'\npatch_id: x\nfile: f\npristine_sha256: a\npatched_sha256: b\nparts: [3]\n"
        "upstream: {parts: [], note: ''}\n"
    )
    with pytest.raises(patches.PatchError, match="lives in folder"):
        patches.load_manifest("9.9.9", tmp_path)
    assert patches.supported_versions(tmp_path) == ["9.9.9"]
