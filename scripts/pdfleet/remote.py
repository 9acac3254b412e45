"""Commands on the inventory's hosts over SSH (fabric), reached exactly as the inventory says
(`pdfleet.inventory.Inventory.connection`: address, port, user, key and the `-F` ssh_config)."""

from __future__ import annotations

from pdfleet.errors import PdfleetError
from pdfleet.inventory import HostConnection, Inventory


class RemoteError(PdfleetError):
    """A host could not be reached or a command could not run on it."""


def connection_for(inventory: Inventory, name: str) -> HostConnection:
    """How to reach inventory host `name` (the inventory's one answer to that question)."""
    return inventory.connection(name)


def fabric_connection(conn: HostConnection, connect_timeout: float = 10):  # noqa: ANN201 - fabric.Connection
    """A fabric Connection for `conn` (imported late: paramiko is slow to import and only day-2 work needs it)."""
    import fabric

    config = fabric.Config(runtime_ssh_path=conn.ssh_config) if conn.ssh_config else fabric.Config()
    kwargs: dict[str, object] = {"key_filename": conn.key_file} if conn.key_file else {}
    return fabric.Connection(conn.address, user=conn.user, port=conn.port, config=config,
                             connect_timeout=connect_timeout, connect_kwargs=kwargs)


def run(conn: HostConnection, command: str, timeout: float = 60) -> tuple[int, str, str]:
    """Run `command` on the host; returns (exit code, stdout, stderr). Raises RemoteError if unreachable."""
    try:
        with fabric_connection(conn) as c:
            result = c.run(command, hide=True, warn=True, timeout=timeout, in_stream=False)
    except Exception as exc:  # paramiko/socket errors come in many types
        where = f"{conn.address}:{conn.port}" if conn.port else conn.address
        raise RemoteError(f"host {conn.name} ({where}): {type(exc).__name__}: {exc}; check that it is up and "
                          "that the inventory's SSH settings work (ansible -m ping)") from None
    return int(result.exited), str(result.stdout), str(result.stderr)
