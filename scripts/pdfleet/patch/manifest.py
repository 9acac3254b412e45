"""Read and check the SGLang patch series' per-version manifests (what each patch carries, its hashes, hardware).

Each supported SGLang version has a folder ``scripts/pdfleet/patches/<version>/`` with
``nixl-conn.patch`` (a unified diff against the pristine file from that version's wheel) and
``manifest.yml`` (what the patch carries and the hashes before and after). The Ansible role applies the
same files on the hosts; :mod:`pdfleet.patch.apply` applies them to scratch copies for verification.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pdfleet.patch.errors import PatchError, UnsupportedVersionError
from pdfleet.paths import PATCH_DIR

PATCH_FILE = "nixl-conn.patch"
MANIFEST_FILE = "manifest.yml"
PARTS = {
    1: "ABORT handler: the room is marked Failed (sticky) and its transfer state dropped",
    2: "transfer_worker drain guard: chunks of cleared, Failed or info-less rooms are skipped",
    3: "non-fatal GUARD check: an unexpected leading frame or malformed message is logged and skipped",
}
_REQUIRED_KEYS = ("version", "patch_id", "file", "pristine_sha256", "patched_sha256", "parts", "upstream")
WORKER_ROLES = ("prefill", "decode", "mono")
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


@dataclass(frozen=True)
class EnvFact:
    """One environment variable a pin needs on a GPU family, with the wheel file and condition it rests on."""

    name: str
    value: str
    roles: tuple[str, ...]  # worker roles whose units get it
    file: str  # the file inside the wheel (sglang/...) that holds the condition
    condition: str


@dataclass(frozen=True)
class FlagFact:
    """Server arguments a pin needs on a GPU family (appended to the units' command lines)."""

    args: tuple[str, ...]
    roles: tuple[str, ...]
    file: str
    condition: str


@dataclass(frozen=True)
class LimitFact:
    """The largest value a server argument may take on a GPU family (the planner refuses more, and -1)."""

    flag: str
    max: int
    roles: tuple[str, ...]
    file: str
    condition: str


@dataclass(frozen=True)
class HardwareFacts:
    """What a pin needs on the GPUs of one compute capability (the manifest's ``hardware.<cc>``)."""

    compute_capability: str
    env: tuple[EnvFact, ...]
    flags: tuple[FlagFact, ...]
    findings: tuple[str, ...]  # what was checked and needs nothing, with its file
    limits: tuple[LimitFact, ...] = ()

    def env_for(self, role: str) -> dict[str, str]:
        return {f.name: f.value for f in self.env if role in f.roles}

    def args_for(self, role: str) -> list[str]:
        return [a for f in self.flags if role in f.roles for a in f.args]


@dataclass(frozen=True)
class PatchManifest:
    """One version's manifest, with the path of its patch file."""

    version: str
    patch_id: str
    file: str  # path of the patched file inside site-packages
    pristine_sha256: str
    patched_sha256: str
    parts: tuple[int, ...]
    upstream_parts: tuple[int, ...]
    upstream_note: str
    patch_path: Path
    # compute capability -> facts; None when the manifest has no `hardware` section (no decision made yet)
    hardware: dict[str, HardwareFacts] | None = None
    # earlier pdfleet patches of this version: patch id -> the sha256 of conn.py carrying it
    superseded: dict[str, str] = field(default_factory=dict)


def default_patches_dir() -> Path:
    """The package's ``patches`` folder (package data)."""
    return PATCH_DIR


def _version_key(version: str) -> tuple[tuple[int, str], ...]:
    return tuple((int(p), "") if p.isdigit() else (-1, p) for p in re.split(r"[.+-]", version))


def supported_versions(patches_dir: Path | None = None) -> list[str]:
    """The SGLang versions that have a manifest, oldest first."""
    root = patches_dir or default_patches_dir()
    if not root.is_dir():
        return []
    found = [d.name for d in root.iterdir() if (d / MANIFEST_FILE).is_file()]
    return sorted(found, key=_version_key)


def load_manifest(version: str, patches_dir: Path | None = None) -> PatchManifest:
    """Load and check the manifest of ``version``; raise UnsupportedVersionError when there is none."""
    root = patches_dir or default_patches_dir()
    folder = root / version
    manifest_path = folder / MANIFEST_FILE
    if not manifest_path.is_file():
        raise UnsupportedVersionError(version, supported_versions(root))
    data = yaml.safe_load(manifest_path.read_text())
    if not isinstance(data, dict):
        raise PatchError(f"{manifest_path}: expected a mapping, got {type(data).__name__}")
    missing = [k for k in _REQUIRED_KEYS if k not in data]
    if missing:
        raise PatchError(f"{manifest_path}: missing keys {', '.join(missing)}")
    if str(data["version"]) != version:
        raise PatchError(f"{manifest_path}: says version {data['version']!r} but lives in folder {version!r}")
    parts = tuple(int(p) for p in data["parts"])
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        raise PatchError(f"{manifest_path}: parts must be a non-empty subset of {sorted(PARTS)}, got {parts}")
    upstream = data["upstream"] or {}
    if not isinstance(upstream, dict):
        raise PatchError(f"{manifest_path}: upstream must be a mapping with 'parts' and 'note'")
    patch_path = folder / PATCH_FILE
    if not patch_path.is_file():
        raise PatchError(f"{manifest_path}: the patch file {patch_path} is missing")
    return PatchManifest(
        version=version,
        patch_id=str(data["patch_id"]),
        file=str(data["file"]),
        pristine_sha256=str(data["pristine_sha256"]),
        patched_sha256=str(data["patched_sha256"]),
        parts=parts,
        upstream_parts=tuple(int(p) for p in upstream.get("parts") or ()),
        upstream_note=str(upstream.get("note", "")),
        patch_path=patch_path,
        hardware=_load_hardware(manifest_path, data.get("hardware")),
        superseded=_load_superseded(manifest_path, data.get("superseded")),
    )


def _load_superseded(path: Path, raw: object) -> dict[str, str]:
    """The manifest's ``superseded`` list: earlier patch ids of this version and their patched sha256."""
    if raw is None:
        return {}
    if not isinstance(raw, list) or not all(isinstance(e, dict) for e in raw):
        raise PatchError(f"{path}: superseded must be a list of {{patch_id, patched_sha256}} mappings")
    out: dict[str, str] = {}
    for entry in raw:
        pid, sha = str(entry.get("patch_id", "")), str(entry.get("patched_sha256", ""))
        if not pid or not re.fullmatch(r"[0-9a-f]{64}", sha):
            raise PatchError(f"{path}: superseded entry {entry!r} needs a patch_id and a 64-hex patched_sha256")
        out[pid] = sha
    return out


def _roles(where: str, raw: object) -> tuple[str, ...]:
    roles = tuple(str(r) for r in raw) if isinstance(raw, list) else ()
    if not roles or not set(roles) <= set(WORKER_ROLES):
        raise PatchError(f"{where}: roles must be a non-empty list of {', '.join(WORKER_ROLES)}, got {raw!r}")
    return roles


def _text(where: str, entry: dict, key: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise PatchError(f"{where}: {key} must be a non-empty string (the wheel file and the condition it rests on)")
    return value.strip()


def _load_hardware(path: Path, raw: object) -> dict[str, HardwareFacts] | None:
    """The ``hardware`` section: {compute capability: {env: [...], flags: [...], findings: [...]}}."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise PatchError(f"{path}: hardware must map a compute capability (e.g. \"12.0\") to env, flags, findings")
    out: dict[str, HardwareFacts] = {}
    for cc, section in raw.items():
        where = f"{path}: hardware.{cc}"
        if not re.fullmatch(r"\d+\.\d+", str(cc)) or not isinstance(section, dict):
            raise PatchError(f"{where}: key must be a quoted compute capability such as \"12.0\" with a mapping")
        unknown = sorted(set(section) - {"env", "flags", "limits", "findings"})
        missing = [k for k in ("env", "flags") if not isinstance(section.get(k), list)]
        if unknown or missing:
            raise PatchError(f"{where}: needs lists env and flags (empty when none; say why in findings); "
                             f"unknown keys {unknown}, missing {missing}")
        env: list[EnvFact] = []
        for i, e in enumerate(section["env"]):
            w = f"{where}.env[{i}]"
            if not isinstance(e, dict) or not _ENV_NAME.fullmatch(str(e.get("name", ""))) or "value" not in e:
                raise PatchError(f"{w}: needs name (an environment variable), value, roles, file, condition")
            env.append(EnvFact(name=str(e["name"]), value=str(e["value"]), roles=_roles(w, e.get("roles")),
                               file=_text(w, e, "file"), condition=_text(w, e, "condition")))
        names = [f.name for f in env]
        if len(set(names)) != len(names):
            raise PatchError(f"{where}.env: a variable is listed twice: {names}")
        flags: list[FlagFact] = []
        for i, f in enumerate(section["flags"]):
            w = f"{where}.flags[{i}]"
            args = f.get("args") if isinstance(f, dict) else None
            if not isinstance(args, list) or not args or not str(args[0]).startswith("--"):
                raise PatchError(f"{w}: needs args (a list starting with a --flag), roles, file, condition")
            flags.append(FlagFact(args=tuple(str(a) for a in args), roles=_roles(w, f.get("roles")),
                                  file=_text(w, f, "file"), condition=_text(w, f, "condition")))
        limits: list[LimitFact] = []
        for i, lim in enumerate(section.get("limits") or []):
            w = f"{where}.limits[{i}]"
            if (not isinstance(lim, dict) or not str(lim.get("flag", "")).startswith("--")
                    or not isinstance(lim.get("max"), int)):
                raise PatchError(f"{w}: needs flag (a --flag), max (an integer), roles, file, condition")
            limits.append(LimitFact(flag=str(lim["flag"]), max=int(lim["max"]), roles=_roles(w, lim.get("roles")),
                                    file=_text(w, lim, "file"), condition=_text(w, lim, "condition")))
        out[str(cc)] = HardwareFacts(compute_capability=str(cc), env=tuple(env), flags=tuple(flags),
                                     findings=tuple(str(x).strip() for x in section.get("findings") or ()),
                                     limits=tuple(limits))
    return out
