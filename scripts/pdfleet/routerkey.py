"""The gateway's API key (``pdfleet_cluster.router.api_key``, on by default), read by every command that calls it.

It has one name, ``PDFLEET_ROUTER_API_KEY``: the inventory keeps it as ``pdfleet_units_secrets:
{PDFLEET_ROUTER_API_KEY: …}`` (Vault), the router unit reads it from its own 0600 ``pdfleet-router-secrets.env``,
and a command finds it, in this order: a file named by the caller (``--api-key-file``: mode 0600 or stricter,
holding the bare key or an env file line ``PDFLEET_ROUTER_API_KEY=<key>``), the environment variable
``PDFLEET_ROUTER_API_KEY``, else the inventory the command was given (its Vault opened with the same flags as
ansible-playbook's). It is never taken from a command line (``ps`` shows those to every user) and never written
to a report.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pdfleet.errors import PdfleetError
from pdfleet.inventory import ROOT_VARIABLE, InventorySource, load_inventory
from pdfleet.planner import ROUTER_KEY_ENV

ENV_NAME = ROUTER_KEY_ENV
SECRETS_VAR = "pdfleet_units_secrets"


class RouterKeyError(PdfleetError):
    """The key file cannot be used (missing, readable by others, empty)."""


def read_key_file(path: Path) -> str:
    """The key in ``path``; refuses a file group or others may read, and one without a key."""
    try:
        st = path.stat()
        text = path.read_text()
    except OSError as e:
        raise RouterKeyError(f"router API key file {path}: {e.strerror or e}. Fix: give the file that holds the "
                             f"key (or set ${ENV_NAME})") from e
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise RouterKeyError(f"router API key file {path} is mode {stat.S_IMODE(st.st_mode):04o}: others may read "
                             f"the key. Fix: chmod 0600 {path}")
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name.strip() == ENV_NAME:
            text = value
            break
    key = text.strip()
    if not key or "\n" in key:
        raise RouterKeyError(f"router API key file {path} holds no key (one line: the key, or {ENV_NAME}=<key>). "
                             "Fix: write the key into it")
    return key


def router_key(path: Path | None = None) -> str | None:
    """The key from ``path`` when given, else from ``$PDFLEET_ROUTER_API_KEY``; None without either."""
    if path is not None:
        return read_key_file(path)
    return os.environ.get(ENV_NAME) or None


def inventory_key(source: InventorySource | None) -> str | None:
    """The key the inventory keeps for the router's host (``pdfleet_units_secrets.PDFLEET_ROUTER_API_KEY``);
    None without an inventory, without a router host in it, or without the key."""
    if source is None:
        return None
    inv = load_inventory(source)
    cluster = inv.shared_var(ROOT_VARIABLE)
    router = cluster.get("router") if isinstance(cluster, dict) else None
    host = router.get("host") if isinstance(router, dict) else None
    if not isinstance(host, str) or host not in inv.host_names:
        return None
    secrets = inv.var(host, SECRETS_VAR, {})
    key = secrets.get(ENV_NAME) if isinstance(secrets, dict) else None
    return (key.strip() or None) if isinstance(key, str) else None


def find_key(path: Path | None = None, source: InventorySource | None = None) -> str | None:
    """The key from ``path``, else ``$PDFLEET_ROUTER_API_KEY``, else the inventory ``source``; None without any."""
    return router_key(path) or inventory_key(source)
