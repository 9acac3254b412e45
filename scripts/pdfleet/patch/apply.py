"""Apply a version's patch to a scratch copy of the pristine file (taken from the wheel) and check both hashes."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from pdfleet.patch.errors import PatchError
from pdfleet.patch.manifest import PatchManifest, load_manifest


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def extract_from_wheel(wheel: Path, member: str, dest: Path) -> Path:
    """Copy ``member`` (e.g. the manifest's ``file``) out of a wheel into ``dest``."""
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(src.read())
    except KeyError as e:
        raise PatchError(f"{wheel.name} has no {member}: is it an SGLang wheel?") from e
    except zipfile.BadZipFile as e:
        raise PatchError(f"{wheel} is not a valid wheel; delete it so it is downloaded again") from e
    return dest


def _patch_binary() -> str:
    found = shutil.which("patch")
    if found is None:
        raise PatchError("GNU patch is not installed; install it (Debian: apt-get install patch)")
    return found


def apply_to_copy(
    version: str, pristine_file: Path, dest: Path, patches_dir: Path | None = None
) -> PatchManifest:
    """Write the patched version of ``pristine_file`` to ``dest`` (the pristine file is not touched).

    The pristine file's hash must match the manifest (else it is not that version's file), the GNU
    ``patch`` binary must apply every hunk exactly, and the result must hash to ``patched_sha256``.
    """
    manifest = load_manifest(version, patches_dir)
    actual = sha256_file(pristine_file)
    if actual != manifest.pristine_sha256:
        raise PatchError(
            f"{pristine_file} (sha256 {actual[:12]}…) is not the pristine {manifest.file} of SGLang "
            f"{version} (expected {manifest.pristine_sha256[:12]}…); take it from the sglang=={version} wheel"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pdfleet-patch-") as tmp:
        out = Path(tmp) / "patched.py"
        proc = subprocess.run(
            [_patch_binary(), "--batch", "--forward", "--fuzz=0", "--silent", "--reject-file=-",
             "-o", str(out), str(pristine_file), str(manifest.patch_path)],
            capture_output=True, text=True, check=False,
        )
        if proc.returncode != 0:
            raise PatchError(
                f"{manifest.patch_path} did not apply to {pristine_file}: "
                f"{(proc.stdout + proc.stderr).strip() or f'exit {proc.returncode}'}"
            )
        patched = sha256_file(out)
        if patched != manifest.patched_sha256:
            raise PatchError(
                f"patching {version} gave sha256 {patched[:12]}…, the manifest expects "
                f"{manifest.patched_sha256[:12]}…; regenerate the manifest after editing the patch"
            )
        shutil.copyfile(out, dest)
    return manifest
