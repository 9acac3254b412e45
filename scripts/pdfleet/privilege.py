"""The rights a command over SSH needs on a host to restart units, read journals and reach the pair leases: as
root, or through ``sudo -n`` (non-interactive; sudo that asks for a password counts as no). One home for the
check and the wrapping, used by ``pdfleet ops`` and the watchdog run from the control machine."""

from __future__ import annotations

import shlex
from collections.abc import Callable

Runner = Callable[[str, str], tuple[int, str, str]]  # (host, shell command) -> (rc, stdout, stderr)

# One round trip per host: the SSH user's uid, and whether sudo runs without asking.
ACCESS_PROBE = "id -u; if sudo -n true >/dev/null 2>&1; then echo sudo; else echo nosudo; fi"
SUDO = "sudo -n "


class AccessError(Exception):
    """The SSH user may not restart units on a host."""


def restart_prefix(run: Runner, host: str) -> str:
    """What to put before a `systemctl` command on ``host``: "" as root, ``sudo -n `` where sudo asks nothing;
    AccessError (naming the host, the user's uid and the fix) otherwise."""
    rc, out, err = run(host, ACCESS_PROBE)
    words = out.split()
    if rc != 0 or len(words) != 2:
        raise AccessError(f"host {host}: could not ask whether the SSH user may restart units (rc {rc}: "
                          f"{(err or out).strip()[:200]})")
    uid, sudo = words
    if uid == "0":
        return ""
    if sudo == "sudo":
        return SUDO
    raise AccessError(
        f"host {host}: the SSH user (uid {uid}) is not root and `sudo -n` asks for a password, so it cannot "
        "restart units there (systemctl would ask for interactive authentication). Fix: run pdfleet ops as a "
        "user with passwordless sudo for systemctl on the worker hosts (as Ansible's become does), or as root")


def privileged(run: Runner, prefixes: dict[str, str]) -> Runner:
    """``run`` with each command under the host's prefix (``sudo -n sh -c '...'``; as root: unchanged), so the
    restart's systemctl calls and the gate's journal reads run with the rights they need."""

    def wrapped(host: str, command: str) -> tuple[int, str, str]:
        prefix = prefixes.get(host, "")
        return run(host, f"{prefix}sh -c {shlex.quote(command)}" if prefix else command)

    return wrapped
