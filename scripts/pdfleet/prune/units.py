"""Parse an installed ``pdfleet-*.service`` file: pdfleet's marker, its kind, role, URL and own environment file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

UNIT_DIR = "/etc/systemd/system"
UNIT_PREFIX = "pdfleet-"
UNIT_GLOB = f"{UNIT_PREFIX}*.service"
MARKER_KEYS = ("X-Pdfleet-Kind", "X-Pdfleet-Role", "X-Pdfleet-Url", "X-Pdfleet-Beside")


@dataclass(frozen=True)
class InstalledUnit:
    """A ``pdfleet-*.service`` file found on a host."""

    name: str  # without .service
    path: str
    marked: bool  # carries pdfleet's X-Pdfleet-* marker: pdfleet created it
    kind: str = ""  # worker | router (marked units only)
    role: str = ""  # prefill | decode | mono | router
    url: str = ""  # where it serves (a worker's URL as the router lists it)
    env_files: tuple[str, ...] = ()  # its own environment file(s): <config_dir>/<name>.env
    active: str = ""  # systemctl is-active, when the reader asked
    beside: str = ""  # the planned unit it belongs beside (X-Pdfleet-Beside), e.g. the watchdog's router


def unit_name(path: str) -> str:
    name = PurePosixPath(path).name
    return name[: -len(".service")] if name.endswith(".service") else name


def parse_unit(path: str, text: str, active: str = "") -> InstalledUnit:
    """Read pdfleet's marker and the unit's own environment files from a unit file's text."""
    name = unit_name(path)
    values: dict[str, str] = {}
    env_files: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key in MARKER_KEYS:
            values[key] = value
        elif key == "EnvironmentFile":
            env = value.lstrip("-")
            # only the unit's own file: secrets.env and anything else are shared or not ours to delete
            if PurePosixPath(env).name == f"{name}.env":
                env_files.append(env)
    marked = bool(values.get("X-Pdfleet-Kind"))
    return InstalledUnit(name=name, path=path, marked=marked, kind=values.get("X-Pdfleet-Kind", ""),
                         role=values.get("X-Pdfleet-Role", ""), url=values.get("X-Pdfleet-Url", "").rstrip("/"),
                         env_files=tuple(env_files) if marked else (), active=active,
                         beside=unit_name(values.get("X-Pdfleet-Beside", "")) if marked else "")
