"""Read hosts' connection settings in a fresh interpreter, for code running inside an Ansible module (AnsiballZ)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from pdfleet.errors import InventoryError
from pdfleet.inventory import HostConnection

_CONNECTIONS_CHILD = ("import dataclasses, json, sys\n"
                      "from pdfleet.inventory import connections\n"
                      "found = connections(sys.argv[1], sys.argv[2:])\n"
                      "print(json.dumps({h: dataclasses.asdict(c) for h, c in found.items()}))\n")


def connections_in_child(source: str | Path, hosts: Sequence[str], python: str = sys.executable,
                         timeout_s: float = 120.0) -> dict[str, HostConnection]:
    """``pdfleet.inventory.connections``, read by a fresh Python process. Inside an Ansible module (AnsiballZ)
    the payload's partial ``ansible`` package (module_utils only) shadows ansible-core, whose InventoryManager
    then fails to import (``cannot import name '_ambient_context' from 'ansible.module_utils._internal'``); a
    child interpreter imports the real one."""
    try:
        proc = subprocess.run([python, "-c", _CONNECTIONS_CHILD, str(source), *hosts], capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InventoryError(f"{source}: reading the hosts' connection settings failed: {e}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise InventoryError(f"{source}: reading the connection settings of {', '.join(hosts)} failed: {last}")
    fields = {f.name for f in dataclasses.fields(HostConnection)}
    out = {}
    for host, d in json.loads(proc.stdout).items():
        d = {k: v for k, v in d.items() if k in fields}
        out[host] = HostConnection(**{**d, "ssh_args": tuple(d.get("ssh_args") or ())})
    return out
