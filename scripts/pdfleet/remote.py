"""Day-2 operations on the inventory's hosts over SSH (fabric), reading the same connection variables
Ansible uses: ansible_host, ansible_user, ansible_port, ansible_ssh_private_key_file and an
`-F <ssh_config>` in ansible_ssh_common_args. Jinja references between variables
(`"{{ pdfleet_sim.state_dir }}/id_ed25519"`) are resolved against the inventory's own variables.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

import jinja2

from pdfleet.errors import PdfleetError
from pdfleet.inventory import Inventory


class RemoteError(PdfleetError):
    """A host could not be reached or a command could not run on it."""


@dataclass(frozen=True)
class HostConnection:
    name: str
    host: str
    user: str | None = None
    port: int | None = None
    key_file: str | None = None
    ssh_config: str | None = None


def _resolve(value: object, context: dict[str, object], depth: int = 5) -> object:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    for _ in range(depth):
        if not isinstance(value, str) or "{{" not in value:
            return value
        try:
            value = env.from_string(value).render(context)
        except jinja2.TemplateError as exc:
            raise RemoteError(f"cannot resolve {value!r}: {exc}") from None
    return value


def connection_for(inventory: Inventory, name: str) -> HostConnection:
    """How to reach inventory host `name`; raises RemoteError naming the inventory for an unknown host."""
    if name not in inventory.hosts:
        raise RemoteError(f"{inventory.path}: no host {name!r} (hosts: {', '.join(sorted(inventory.hosts))})")
    context = {**inventory.variables, **inventory.host_vars.get(name, {})}
    get = lambda key: _resolve(context.get(key), context)  # noqa: E731 - local shorthand
    ssh_config = None
    args = shlex.split(str(get("ansible_ssh_common_args") or ""))
    if "-F" in args and args.index("-F") + 1 < len(args):
        ssh_config = args[args.index("-F") + 1]
    port = get("ansible_port")
    return HostConnection(
        name=name,
        host=str(get("ansible_host") or name),
        user=str(get("ansible_user")) if get("ansible_user") else None,
        port=int(str(port)) if port else None,
        key_file=str(get("ansible_ssh_private_key_file")) if get("ansible_ssh_private_key_file") else None,
        ssh_config=ssh_config,
    )


def run(conn: HostConnection, command: str, timeout: float = 60) -> tuple[int, str, str]:
    """Run `command` on the host; returns (exit code, stdout, stderr). Raises RemoteError if unreachable."""
    import fabric  # imported here: fabric (paramiko) is slow to import and only day-2 commands need it

    config = fabric.Config(runtime_ssh_path=conn.ssh_config) if conn.ssh_config else fabric.Config()
    kwargs: dict[str, object] = {}
    if conn.key_file:
        kwargs["key_filename"] = conn.key_file
    try:
        with fabric.Connection(conn.host, user=conn.user, port=conn.port, config=config, connect_timeout=10,
                               connect_kwargs=kwargs) as c:
            result = c.run(command, hide=True, warn=True, timeout=timeout, in_stream=False)
    except Exception as exc:  # paramiko/socket errors come in many types
        raise RemoteError(f"host {conn.name} ({conn.host}): {type(exc).__name__}: {exc}; check that it is up and "
                          "that the inventory's SSH settings work (ansible -m ping)") from None
    return int(result.exited), str(result.stdout), str(result.stderr)
