"""The router's API key (``pdfleet_cluster.router.api_key: true``), read by the commands that call the router.

Where it lives, in this order: a file named by the caller (``--api-key-file``: mode 0600 or stricter, holding the
bare key or an env file line ``PDFLEET_ROUTER_API_KEY=<key>``, e.g. the host's ``/etc/pdfleet/secrets.env``),
else the environment variable ``PDFLEET_ROUTER_API_KEY``. It is never taken from a command line (``ps`` shows
those to every user) and never written to a report. The Ansible side keeps it as ``pdfleet_units_secrets:
{PDFLEET_ROUTER_API_KEY: …}`` (Vault); ``pdfleet_router_api_key`` overrides that for the router calls.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pdfleet.errors import PdfleetError

ENV_NAME = "PDFLEET_ROUTER_API_KEY"


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
