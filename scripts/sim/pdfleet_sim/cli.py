"""`pdfleet sim up|down|status`: a thin layer over `pdfleet_sim`.

With `-i INVENTORY` the hosts (`ansible_host`, and `pdfleet_sim_os`: the distribution a host reports, see
pdfleet_sim.distro) and the `pdfleet_sim` variable (bridge, cidr, gateway, state_dir, with_runtime) come from the
inventory; without it, from the flags.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from . import hosts, image
from .hosttypes import DEFAULT_CACHE_DIR, DEFAULT_OS, DEFAULT_STATE_DIR, SimError, SimHost, SimNetwork
from .system import require_root

if TYPE_CHECKING:
    from pdfleet.inventory import InventorySource

DEFAULT_BRIDGE = "pdfleet0"
DEFAULT_CIDR = "10.77.0.0/24"


def _progress(msg: str) -> None:
    print(f"[sim] {msg}", file=sys.stderr, flush=True)


def _parse_host(text: str) -> SimHost:
    name, sep, address = text.partition("=")
    if not sep or not name or not address:
        raise argparse.ArgumentTypeError(f"expected NAME=ADDRESS, got {text!r}")
    return SimHost(name, address)


def _source(args: argparse.Namespace) -> InventorySource:
    """-i with the Vault flags."""
    from pdfleet.inventory_flags import source_from_args

    return source_from_args(args)


@functools.lru_cache(maxsize=4)
def _inventory_sim(given: Path | InventorySource) -> tuple[list[SimHost], dict[str, object]]:
    """The inventory's hosts and its `pdfleet_sim` settings (read once per command)."""
    from pdfleet.inventory import InventorySource, load_inventory

    source = InventorySource.of(given)
    path = source.path
    inv = load_inventory(source)
    sim = inv.variables.get("pdfleet_sim")
    if not isinstance(sim, dict):
        raise SimError(f"{path}: no `pdfleet_sim` variable (bridge, cidr, gateway, state_dir): not a sim inventory")
    _check_connection_paths(path, sim, {h: inv.var(h, "ansible_ssh_common_args") for h in inv.hosts})
    # pdfleet_sim_os: the distribution a host reports (pdfleet_sim.distro); default the image's, Debian 12
    return [SimHost(name, address, str(inv.var(name, "pdfleet_sim_os", DEFAULT_OS)))
            for name, address in inv.hosts.items()], sim


def _check_connection_paths(path: Path, sim: dict[str, object], common_args: dict[str, object]) -> None:
    """The sim inventories write their ssh_config path literally (connection variables are templated on every
    task of every host, so a template there costs each task): it must be the one `sim up` writes."""
    state_dir = Path(str(sim.get("state_dir", DEFAULT_STATE_DIR)))
    want = f"-F {state_dir / 'ssh_config'}"
    for host, have in common_args.items():
        if have is not None and str(have).strip() != want:
            raise SimError(f"{path}: host {host}: ansible_ssh_common_args is {have!r}, but `pdfleet sim up` writes "
                           f"the ssh_config of pdfleet_sim.state_dir {state_dir}: set it to {want!r}")


def _state_dir(args: argparse.Namespace) -> Path:
    if args.state_dir is not None:
        return args.state_dir
    if args.inventory is not None:
        return Path(str(_inventory_sim(_source(args))[1].get("state_dir", DEFAULT_STATE_DIR)))
    return DEFAULT_STATE_DIR


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a TCP port number, got {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is outside 1-65535")
    return port


def _cidr(text: str) -> str:
    try:
        ipaddress.ip_network(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{e} (e.g. 10.77.0.0/24)") from e
    return text


def _address(text: str) -> str:
    try:
        ipaddress.ip_address(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return text


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from e
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be 1 or more")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    from pdfleet.inventory_flags import add_vault_arguments

    sim = subparsers.add_parser("sim", help="simulated cluster: systemd-nspawn hosts on this machine")
    sim_sub = sim.add_subparsers(dest="sim_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-i", "--inventory", type=Path, help="take hosts and pdfleet_sim settings from this inventory")
    add_vault_arguments(common, "for -i")
    common.add_argument(
        "--state-dir",
        type=Path,
        help=f"overlays, SSH key, ssh_config, pid files (default: inventory's, else {DEFAULT_STATE_DIR})",
    )

    p_up = sim_sub.add_parser("up", parents=[common], help="start the sim hosts (idempotent)")
    p_up.add_argument(
        "--host",
        dest="hosts",
        action="append",
        type=_parse_host,
        metavar="NAME=ADDRESS",
        help="a host to start (repeat); default: --count hosts node1=10.77.0.11, ...",
    )
    p_up.add_argument("--count", type=_count, default=3, help="number of default hosts (default 3)")
    p_up.add_argument("--bridge", default=DEFAULT_BRIDGE, help=f"bridge name (default {DEFAULT_BRIDGE})")
    p_up.add_argument("--cidr", type=_cidr, default=DEFAULT_CIDR, help=f"bridge subnet (default {DEFAULT_CIDR})")
    p_up.add_argument("--gateway", type=_address,
                      help="this machine's address on the bridge (default: first of --cidr)")
    p_up.add_argument(
        "--no-runtime",
        dest="with_runtime",
        action="store_false",
        default=None,
        help="skip the heavy Python runtime (torch, ...) at /opt/pdfleet-runtime",
    )
    p_up.add_argument(
        "--runtime-later",
        action="store_true",
        help="start the hosts once the golden image is ready; the runtime, if not built, builds in the background "
             "(`pdfleet sim runtime` waits for it)",
    )
    p_up.add_argument(
        "--cache-dir",
        type=Path,
        default=DEFAULT_CACHE_DIR,
        help=f"golden image and runtime cache (default {DEFAULT_CACHE_DIR})",
    )
    p_up.add_argument("--serve-repo", type=_port, metavar="PORT",
                      help="also build and serve the stand-in CUDA/pip repository on the bridge's gateway at PORT "
                           "(idempotent; the server ends with the sim cluster)")
    p_up.add_argument("--json", action="store_true", help="print the cluster as JSON on stdout")
    p_up.set_defaults(func=_cmd_up)

    p_runtime = sim_sub.add_parser(
        "runtime", parents=[common],
        help="wait for the CPU runtime a `sim up --runtime-later` builds in the background (or build it) and print "
             "its directory")
    p_runtime.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR,
                           help=f"golden image and runtime cache (default {DEFAULT_CACHE_DIR})")
    p_runtime.set_defaults(func=_cmd_runtime)

    p_down = sim_sub.add_parser("down", parents=[common], help="stop and delete all sim hosts and the bridge")
    p_down.set_defaults(func=_cmd_down)

    p_status = sim_sub.add_parser("status", parents=[common], help="show the sim hosts")
    p_status.add_argument("--json", action="store_true", help="print JSON")
    p_status.set_defaults(func=_cmd_status)


def _cmd_up(args: argparse.Namespace) -> int:
    with_runtime = True
    if args.inventory is not None:
        sim_hosts, sim = _inventory_sim(_source(args))
        try:
            network = SimNetwork(str(sim["bridge"]), str(sim["cidr"]), str(sim["gateway"]))
        except KeyError as exc:
            raise SimError(f"{args.inventory}: pdfleet_sim needs bridge, cidr and gateway (missing {exc})") from exc
        with_runtime = bool(sim.get("with_runtime", True))
    else:
        gateway = args.gateway or str(next(ipaddress.ip_network(args.cidr).hosts()))
        network = SimNetwork(args.bridge, args.cidr, gateway)
        base = gateway.rsplit(".", 1)[0]
        sim_hosts = [SimHost(f"node{i}", f"{base}.{10 + i}") for i in range(1, args.count + 1)]
    if args.hosts:
        sim_hosts = args.hosts
    if args.with_runtime is not None:
        with_runtime = args.with_runtime
    cluster = hosts.up(
        sim_hosts,
        network,
        state_dir=_state_dir(args),
        progress=_progress,
        with_runtime=with_runtime,
        runtime_later=args.runtime_later,
        cache_dir=args.cache_dir,
    )
    repo = None
    if args.serve_repo is not None:
        from . import aptrepo

        repo = aptrepo.ensure(cluster.state_dir, network.bridge, network.gateway, args.serve_repo,
                              cache_dir=args.cache_dir)
    if args.json:
        data = asdict(cluster)
        data["ansible_host_vars"] = {h.name: cluster.ansible_host_vars(h) for h in cluster.hosts}
        data["repo"] = asdict(repo) if repo is not None else None
        print(json.dumps(data, indent=2, default=str))
    else:
        for h in cluster.hosts:
            print(f"{h.name}\t{h.address}")
        if repo is not None:
            print(f"stand-in repository: {repo.url}")
        print(f"ssh -F {cluster.ssh_config} {cluster.hosts[0].name}")
    return 0


def _cmd_runtime(args: argparse.Namespace) -> int:
    if args.inventory is not None and not bool(_inventory_sim(_source(args))[1].get("with_runtime", True)):
        print("the inventory's sim hosts run without the runtime (pdfleet_sim.with_runtime: false)")
        return 0
    require_root("pdfleet sim runtime")
    start = time.monotonic()
    golden = image.ensure_golden(args.cache_dir, _progress)
    runtime = image.ensure_runtime(golden, args.cache_dir, _progress)
    print(f"{runtime} (ready after {time.monotonic() - start:.1f} s)")
    return 0


def _cmd_down(args: argparse.Namespace) -> int:
    hosts.down(_state_dir(args), _progress)
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args)
    rows = hosts.status(state_dir)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=2))
        return 0 if all(r.state == "running" for r in rows) else 1
    if not rows:
        print(f"no sim cluster in {state_dir}")
        return 0
    print(f"{'HOST':<12} {'ADDRESS':<15} {'STATE':<8} {'SSH':<4} {'MEM MiB':>8}  RUNTIME")
    for r in rows:
        mem = f"{r.memory_bytes / 2**20:.0f}" if r.memory_bytes else "-"
        ssh_open = "yes" if r.ssh_port_open else "no"
        runtime = "yes" if r.with_runtime else "no"
        print(f"{r.name:<12} {r.address:<15} {r.state:<8} {ssh_open:<4} {mem:>8}  {runtime}")
    return 0 if all(r.state == "running" for r in rows) else 1


def main(argv: list[str] | None = None) -> int:
    """Standalone entry: `python -m pdfleet_sim.cli sim up|down|status ...`."""
    parser = argparse.ArgumentParser(prog="pdfleet")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except SimError as exc:
        print(f"pdfleet: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
