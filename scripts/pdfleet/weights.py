"""Model weights manifest (`pdfleet.weights`): every file of a staged model with its relative path, size and sha256.

`build DIR` writes DIR/pdfleet-model-manifest.json for a mirror (run once, where the mirror lives);
`check DIR` verifies a copy against it: sizes always (cheap, what the `model` role uses to decide whether to
stage at all), sha256 too with `--full` (reads every byte: minutes for ~160 GB).

Exit codes: 0 = the copy matches, 1 = a file is missing or differs, 2 = could not run (no manifest, bad JSON,
not a directory).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pdfleet.errors import PdfleetError
from pdfleet.versions import MODEL_MANIFEST_NAME

MANIFEST_NAME = MODEL_MANIFEST_NAME  # constants.yml, shared with the model role
FORMAT_VERSION = 1
_CHUNK = 8 * 1024 * 1024

Progress = Callable[[str], None]


class ManifestError(PdfleetError):
    """The manifest or the directory could not be read (exit code 2)."""


@dataclass(frozen=True)
class ManifestFile:
    path: str  # relative, '/'-separated
    size: int
    sha256: str


@dataclass(frozen=True)
class Mismatch:
    path: str
    problem: str  # missing | size | sha256
    expected: str
    found: str

    def __str__(self) -> str:
        if self.problem == "missing":
            return f"{self.path}: missing (expected {self.expected} bytes)"
        return f"{self.path}: {self.problem} is {self.found}, expected {self.expected}"


@dataclass
class CheckResult:
    directory: str
    full: bool
    files: int
    bytes: int
    failures: list[Mismatch] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "directory": self.directory,
            "full": self.full,
            "files": self.files,
            "bytes": self.bytes,
            "failures": [asdict(m) for m in self.failures],
        }


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _walk(directory: Path) -> Iterator[Path]:
    for root, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(files):
            yield Path(root) / name


def _require_dir(directory: Path) -> None:
    if not directory.is_dir():
        raise ManifestError(f"{directory} is not a directory (fix: pass the model directory)")


def build(directory: Path, progress: Progress | None = None) -> list[ManifestFile]:
    """Hash every regular file under `directory` (the manifest itself and the hub's cache dir excluded)."""
    _require_dir(directory)
    entries: list[ManifestFile] = []
    for path in _walk(directory):
        rel = path.relative_to(directory).as_posix()
        if rel == MANIFEST_NAME or rel.startswith(".cache/") or not path.is_file() or path.is_symlink():
            continue
        if progress:
            progress(f"hashing {rel}")
        entries.append(ManifestFile(rel, path.stat().st_size, sha256_of(path)))
    if not entries:
        raise ManifestError(f"{directory} has no files to put in a manifest (fix: point at the model mirror)")
    return entries


def write(directory: Path, entries: list[ManifestFile]) -> Path:
    out = directory / MANIFEST_NAME
    doc = {"version": FORMAT_VERSION, "files": [asdict(e) for e in entries]}
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    tmp.replace(out)
    return out


def load(manifest: Path) -> list[ManifestFile]:
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ManifestError(
            f"no manifest at {manifest} (fix: run `python -m pdfleet.weights build DIR` on the mirror)"
        ) from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise ManifestError(f"cannot read manifest {manifest}: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("version") != FORMAT_VERSION or not isinstance(doc.get("files"), list):
        raise ManifestError(f"{manifest} is not a version-{FORMAT_VERSION} pdfleet model manifest")
    try:
        entries = [ManifestFile(str(f["path"]), int(f["size"]), str(f["sha256"])) for f in doc["files"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ManifestError(f"{manifest}: malformed file entry ({exc})") from exc
    for e in entries:
        if e.path.startswith("/") or ".." in e.path.split("/"):
            raise ManifestError(f"{manifest}: unsafe path {e.path!r}")
    return entries


def check(
    directory: Path, manifest: Path | None = None, full: bool = False, progress: Progress | None = None
) -> CheckResult:
    """Compare `directory` with the manifest: every listed file present with its size (and sha256 if full)."""
    _require_dir(directory)
    entries = load(manifest or directory / MANIFEST_NAME)
    result = CheckResult(str(directory), full, len(entries), sum(e.size for e in entries))
    for e in entries:
        path = directory / e.path
        if not path.is_file():
            result.failures.append(Mismatch(e.path, "missing", str(e.size), ""))
            continue
        size = path.stat().st_size
        if size != e.size:
            result.failures.append(Mismatch(e.path, "size", str(e.size), str(size)))
            continue
        if full:
            if progress:
                progress(f"hashing {e.path}")
            got = sha256_of(path)
            if got != e.sha256:
                result.failures.append(Mismatch(e.path, "sha256", e.sha256, got))
    return result


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pdfleet.weights", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_build = sub.add_parser("build", help=f"write DIR/{MANIFEST_NAME}")
    p_build.add_argument("directory", type=Path)
    p_check = sub.add_parser("check", help="verify DIR against its manifest (exit 0 ok, 1 mismatch, 2 error)")
    p_check.add_argument("directory", type=Path)
    p_check.add_argument("--manifest", type=Path, default=None, help=f"default: DIR/{MANIFEST_NAME}")
    p_check.add_argument("--full", action="store_true", help="also compare sha256 (reads every byte)")
    p_check.add_argument("--json", action="store_true", help="print one JSON verdict instead of text")
    p_check.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "build":
            t0 = time.monotonic()
            entries = build(args.directory, _stderr)
            out = write(args.directory, entries)
            total = sum(e.size for e in entries)
            print(f"wrote {out}: {len(entries)} files, {total} bytes in {time.monotonic() - t0:.1f} s")
            return 0
        result = check(args.directory, args.manifest, args.full, None if args.quiet or args.json else _stderr)
    except PdfleetError as exc:
        if getattr(args, "json", False):
            print(json.dumps({"ok": False, "error": str(exc)}))
        else:
            print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
    else:
        what = "sizes and sha256" if result.full else "sizes"
        verdict = "OK" if result.ok else f"{len(result.failures)} file(s) differ"
        print(f"{result.directory}: {result.files} files, {result.bytes} bytes, checked {what}: {verdict}")
        for m in result.failures:
            print(f"  {m}")
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
