"""Commands on the inventory's hosts over SSH (fabric), reached exactly as the inventory says
(`pdfleet.inventory.Inventory.connection`: address, port, user, key and the `-F` ssh_config)."""

from __future__ import annotations

import os

from pdfleet import sshconfig
from pdfleet.errors import PdfleetError
from pdfleet.inventory import HostConnection, Inventory


class RemoteError(PdfleetError):
    """A host could not be reached or a command could not run on it."""


def connection_for(inventory: Inventory, name: str) -> HostConnection:
    """How to reach inventory host `name` (the inventory's one answer to that question)."""
    return inventory.connection(name)


def fabric_connection(conn: HostConnection, connect_timeout: float = 10):  # noqa: ANN201 - fabric.Connection
    """A fabric Connection for `conn` with OpenSSH's view of its settings (pdfleet.sshconfig: the inventory's
    ``-o`` options, ``-J``, ``-F`` file) and host keys checked: only a key in the known_hosts files OpenSSH would
    read is accepted, for the host and for every ProxyJump hop (paramiko is imported late: it is slow to import
    and only day-2 work needs it)."""
    import fabric

    settings = sshconfig.resolve(conn.name, conn.ssh_args, conn.address)
    kwargs: dict[str, object] = {"key_filename": conn.key_file} if conn.key_file else {}
    c = fabric.Connection(conn.address, user=conn.user, port=conn.port,
                          config=fabric.Config(ssh_config=settings.config()), connect_timeout=connect_timeout,
                          connect_kwargs=kwargs, gateway=_jumps(settings, conn.address, connect_timeout))
    hop = c
    while isinstance(hop, fabric.Connection):
        _check_host_keys(hop, settings)
        hop = hop.gateway
    return c


def _jumps(settings: sshconfig.SshSettings, address: str, connect_timeout: float):  # noqa: ANN202
    """The ProxyJump hops in OpenSSH's order (``-J a,b``: a first, then b through a, then the host through b) as
    a chain of fabric Connections, the last hop returned (None: no ProxyJump; Fabric then reads ProxyCommand).
    Fabric's own reading of a multi-hop ProxyJump walks the hops backwards."""
    import fabric

    jumps = settings.config().lookup(address).get("proxyjump", "")
    if not jumps or jumps.lower() == "none":
        return None
    gateway = None
    for hop in (h.strip() for h in jumps.split(",")):
        gateway = fabric.Connection(hop, config=fabric.Config(ssh_config=settings.config()),
                                    connect_timeout=connect_timeout, gateway=gateway)
    return gateway


def _check_host_keys(c, settings: sshconfig.SshSettings) -> None:  # noqa: ANN001 - fabric.Connection
    """Reject any host key that is not in the known_hosts files OpenSSH would read for this hop (Fabric's own
    default accepts every key)."""
    import paramiko

    keys = c.client.get_host_keys()
    for path in settings.known_hosts_files(c.original_host):
        if os.path.isfile(path):
            try:
                keys.load(path)
            except (OSError, paramiko.SSHException) as exc:
                raise RemoteError(f"host {settings.host}: the known_hosts file {path} cannot be read ({exc}); "
                                  "fix or remove it") from None
    c.client.set_missing_host_key_policy(paramiko.RejectPolicy())


def _host_key_fix(conn: HostConnection, exc: Exception) -> str | None:
    """What to do about a host key paramiko refused (None when ``exc`` is not about a host key)."""
    import paramiko

    files = ", ".join(sshconfig.resolve(conn.name, conn.ssh_args, conn.address).known_hosts_files(conn.address))
    files = files or "(none)"
    if isinstance(exc, paramiko.BadHostKeyException):
        return (f"its SSH host key is not the one known_hosts ({files}) holds for it: the host was reinstalled, or "
                "something is in the way. Fix: check the host's key fingerprint out of band; if the host was "
                f"rebuilt, remove the old entry (ssh-keygen -R {conn.address}) and add the new one")
    if isinstance(exc, paramiko.SSHException) and "not found in known_hosts" in str(exc):
        return (f"its SSH host key is in none of the known_hosts files ({files}); pdfleet never accepts an "
                "unknown key. Fix: check the host's key fingerprint out of band and add it to known_hosts (or "
                "name a known_hosts file in the inventory: -o UserKnownHostsFile=... in ansible_ssh_common_args)")
    return None


def run(conn: HostConnection, command: str, timeout: float = 60) -> tuple[int, str, str]:
    """Run `command` on the host; returns (exit code, stdout, stderr). Raises RemoteError if unreachable."""
    try:
        with fabric_connection(conn) as c:
            result = c.run(command, hide=True, warn=True, timeout=timeout, in_stream=False)
    except sshconfig.SshSettingsError as exc:
        raise RemoteError(str(exc)) from None
    except Exception as exc:  # paramiko/socket errors come in many types
        where = f"{conn.address}:{conn.port}" if conn.port else conn.address
        fix = _host_key_fix(conn, exc)
        if fix:
            raise RemoteError(f"host {conn.name} ({where}): {fix}") from None
        raise RemoteError(f"host {conn.name} ({where}): {type(exc).__name__}: {exc}; check that it is up and "
                          "that the inventory's SSH settings work (ansible -m ping)") from None
    return int(result.exited), str(result.stdout), str(result.stderr)
