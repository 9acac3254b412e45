"""Version facts and shared constants, read from constants.yml (the one file the Ansible roles read too).

Light on purpose: the Ansible filter plugin imports it, so it must not pull in the heavy runtime modules.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

CONSTANTS_FILE = Path(__file__).with_name("constants.yml")


def _load() -> dict[str, Any]:
    data = yaml.safe_load(CONSTANTS_FILE.read_text())
    if not isinstance(data, dict):  # pragma: no cover - a broken package
        raise RuntimeError(f"{CONSTANTS_FILE}: expected a mapping of constants")
    return data


CONSTANTS: dict[str, Any] = _load()
PINS: dict[str, Any] = CONSTANTS["pins"]

# CUDA toolkit -> minimum Linux driver (NVIDIA's compatibility table).
CUDA_DRIVER_FLOORS: dict[str, tuple[int, ...]] = {
    str(k): tuple(int(x) for x in v) for k, v in CONSTANTS["cuda_driver_floors"].items()
}
CUDA_FLOOR: str = str(CONSTANTS["cuda_floor"])
RECORD_NAME: str = CONSTANTS["record_name"]
# Ports the router host's other services listen on (Prometheus, the watchdog's metrics): no unit may take them.
RESERVED_PORTS: dict[int, str] = {int(k): str(v) for k, v in CONSTANTS["reserved_ports"].items()}
MODEL_MANIFEST_NAME: str = CONSTANTS["model_manifest_name"]
# The router packages the bundle deploys -> the module its router starts from (python -m MODULE …).
ROUTER_MODULES: dict[str, str] = {str(k): str(v) for k, v in CONSTANTS["router_modules"].items()}
# Each router package's release the bundle ships a lock for: the pin's, and the other packages' (router_releases).
ROUTER_RELEASES: dict[str, str] = {**{str(k): str(v) for k, v in CONSTANTS["router_releases"].items()},
                                   PINS["sglang_router_package"]: PINS["sglang_router_version"]}


def router_module(package: str) -> str:
    """The module ``package``'s router starts from; ValueError naming the choices for another package."""
    try:
        return ROUTER_MODULES[package]
    except KeyError:
        raise ValueError(f"router package {package!r} is not one pdfleet deploys (choose one of "
                         f"{', '.join(sorted(ROUTER_MODULES))}: pdfleet_cluster.sglang.router_package)") from None


def _state_directory(key: str) -> Path:
    """constants.yml's ``key``: a systemd StateDirectory, so a directory directly under /var/lib."""
    path = Path(str(CONSTANTS[key]))
    if path.parent != Path("/var/lib") or path.name in ("", ".", ".."):  # pragma: no cover - a broken package
        raise RuntimeError(f"{CONSTANTS_FILE}: {key} {path} must be a directory directly under /var/lib "
                           "(it is a systemd StateDirectory)")
    return path


# The pair leases' store on the router host (pdfleet.lease; the watchdog unit's second StateDirectory).
LEASE_DIR: Path = _state_directory("lease_dir")
# The watchdog's own state on the router host (its state file; the unit's first StateDirectory, its user's home).
WATCHDOG_STATE_DIR: Path = _state_directory("watchdog_state_dir")
DRIVER_HOLD_REGEX: dict[str, re.Pattern[str]] = {
    distro: re.compile(pattern) for distro, pattern in CONSTANTS["driver_hold_regex"].items()
}
UCX_TLS_ALIASES: frozenset[str] = frozenset(CONSTANTS["ucx_tls_aliases"])
UCX_TLS_TRANSPORTS: frozenset[str] = frozenset(CONSTANTS["ucx_tls_transports"])
# What the simulated hosts install with --no-deps on top of SGLang's CPU runtime, per SGLang version: its own list,
# then the one every version shares.
OVERLAY_REQUIREMENTS: dict[str, tuple[str, ...]] = {
    str(k): (*v, *CONSTANTS["overlay_common"]) for k, v in CONSTANTS["overlay_requirements"].items()
}

# SGLang's --log-level choices; "debug" shows the scheduler's abort lines, "info" the disconnects.
SUPPORTED_LOG_LEVELS = ("debug", "info", "warning", "error")


def version_tuple(text: str) -> tuple[int, ...]:
    """'580.95.05' -> (580, 95, 5); raises ValueError naming the bad version."""
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        raise ValueError(f"{text!r} is not a dotted numeric version") from None
