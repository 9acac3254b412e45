"""Lifecycle of the simulated hosts: overlays on the golden image, one systemd-nspawn per host (under a
small supervisor, in its own cgroup), SSH access, and a teardown that leaves nothing behind."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from . import aptrepo, distro, image
from . import network as simnet
from .hosttypes import (
    DEFAULT_CACHE_DIR,
    HostStatus,
    Progress,
    SimCluster,
    SimError,
    SimHost,
    SimNetwork,
    validate_host_name,
)
from .system import (
    cgroup_joiner,
    cgroup_pids,
    is_mountpoint,
    kill_cgroup,
    lock_file,
    pid_alive,
    prepare_nspawn_host,
    read_pid,
    require_root,
    require_tools,
    run,
    safe_rmtree,
    undo_nspawn_host,
    unmount_all,
    wait_until,
)

CLUSTER_FILE = "cluster.json"
KEY_NAME = "id_ed25519"
SSH_CONFIG = "ssh_config"
KNOWN_HOSTS = "known_hosts"
# The unprivileged account a production-shaped inventory connects as (ansible_user, with become through sudo),
# as an operator's inventory would: the sim key logs in as it; root's login stays for the sim's own tooling.
ADMIN_USER = "pdfleet-admin"
ADMIN_UID = 1500
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
WRAPPER = Path(__file__).with_name("wrapper.py")


def _noop(_msg: str) -> None:
    pass


# ---------------------------------------------------------------- state files


def _cluster_file(state_dir: Path) -> Path:
    return state_dir / CLUSTER_FILE


def _load_cluster(state_dir: Path) -> dict | None:
    try:
        return json.loads(_cluster_file(state_dir).read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise SimError(f"{_cluster_file(state_dir)} is corrupt ({exc}); run `pdfleet sim down`") from exc


def _save_cluster(state_dir: Path, data: dict) -> None:
    tmp = _cluster_file(state_dir).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    tmp.rename(_cluster_file(state_dir))


def machine_name(state_dir: Path, host: str) -> str:
    """The nspawn machine (and cgroup) name: unique per state dir and short enough that nspawn's bridge
    interface `vb-<machine>` fits the 15-character limit."""
    digest = hashlib.sha256(f"{state_dir.resolve()}\0{host}".encode()).hexdigest()
    return f"pf{digest[:10]}"


def _host_dir(state_dir: Path, host: str) -> Path:
    return state_dir / "hosts" / host


# ---------------------------------------------------------------- SSH


def ensure_key(state_dir: Path) -> Path:
    key = state_dir / KEY_NAME
    if not key.is_file() or not key.with_suffix(".pub").is_file():
        key.unlink(missing_ok=True)
        key.with_suffix(".pub").unlink(missing_ok=True)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "pdfleet-sim", "-f", str(key)])
    return key


def write_known_hosts(state_dir: Path, hosts: Sequence[SimHost]) -> Path:
    """The sim's own known_hosts: each host's public host keys (made by `ssh-keygen -A` on its first boot, kept in
    its overlay's upper layer) under its name and address. The ssh_config checks host keys against it only, so a
    host that answers with another key is refused, as a production host would be."""
    lines = []
    for host in hosts:
        keydir = _host_dir(state_dir, host.name) / "upper" / "etc" / "ssh"
        for pub in sorted(keydir.glob("ssh_host_*_key.pub")):
            kind, blob = pub.read_text().split()[:2]
            lines.append(f"{host.name},{host.address} {kind} {blob}")
    path = state_dir / KNOWN_HOSTS
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(f"{line}\n" for line in lines))
    tmp.chmod(0o644)
    tmp.rename(path)
    return path


def write_ssh_config(state_dir: Path, hosts: Sequence[SimHost]) -> Path:
    key = state_dir / KEY_NAME
    lines = [
        "# Written by `pdfleet sim up`; use with `ssh -F`",
        "# (Ansible: ansible_ssh_common_args='-F <this file>').",
    ]
    for host in hosts:
        lines += [
            f"Host {host.name} {host.address}",
            f"    HostName {host.address}",
            "    User root",
            f"    IdentityFile {key}",
            "    IdentitiesOnly yes",
            "    StrictHostKeyChecking yes",
            f"    UserKnownHostsFile {state_dir / KNOWN_HOSTS}",
            "    GlobalKnownHostsFile /dev/null",
            "    LogLevel ERROR",
            "    ConnectTimeout 5",
            "    ServerAliveInterval 5",
            "",
        ]
    path = state_dir / SSH_CONFIG
    path.write_text("\n".join(lines))
    return path


def ssh(state_dir: Path, host: str, command: str, *, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `command` on a sim host as root (ControlMaster off: nothing outlives the call)."""
    return subprocess.run(
        [
            "ssh",
            "-F",
            str(state_dir / SSH_CONFIG),
            "-o",
            "BatchMode=yes",
            "-o",
            "ControlMaster=no",
            "-o",
            "ControlPath=none",
            host,
            command,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def _port_open(address: str, port: int = 22, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            return sock.recv(4).startswith(b"SSH")
    except OSError:
        return False


# ---------------------------------------------------------------- one host


def _host_running(state_dir: Path, host: str) -> tuple[int | None, bool]:
    """(wrapper pid, running?): running means the host's supervisor lives, in the host's cgroup."""
    hdir = _host_dir(state_dir, host)
    pid = read_pid(hdir / "wrapper.pid")
    if not pid_alive(pid):
        return pid, False
    return pid, pid in cgroup_pids(machine_name(state_dir, host))


def _init_pid(state_dir: Path, host: str) -> int | None:
    """PID (on this machine) of the container's systemd."""
    for pid in sorted(cgroup_pids(machine_name(state_dir, host))):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{pid}/status").read_text()
            nspid = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
            if len(nspid) == 2 and nspid[1] == "1":
                return pid
    return None


def _write_host_files(
    root: Path, host: SimHost, hosts: Sequence[SimHost], network: SimNetwork, pubkey: str, first_boot: bool
) -> None:
    prefix = network.cidr.split("/")[1]
    etc = root / "etc"
    if first_boot:
        (etc / "machine-id").write_text(uuid.uuid4().hex + "\n")
        run(["ssh-keygen", "-A", "-f", str(root)])  # this host's own SSH host keys
    (etc / "hostname").write_text(host.name + "\n")
    netdir = etc / "systemd/network"
    netdir.mkdir(parents=True, exist_ok=True)
    (netdir / "10-pdfleet-sim.network").write_text(
        "# Written by pdfleet sim: the static address on the sim bridge.\n"
        "[Match]\nName=host0\n\n"
        f"[Network]\nAddress={host.address}/{prefix}\nGateway={network.gateway}\n"
        "LinkLocalAddressing=no\nIPv6AcceptRA=no\n"
    )
    write_etc_hosts(root, host, hosts)
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(pubkey)
    (ssh_dir / "authorized_keys").chmod(0o600)
    _write_admin(root, pubkey)


def _write_admin(root: Path, pubkey: str) -> None:
    """The unprivileged operator account (ADMIN_USER): a login shell, the sim key, the journal readers' group (as an
    operator account usually has), and sudo without a password (as
    `become` needs; a production inventory's become password would come from Vault)."""
    if not (root / "home" / ADMIN_USER).is_dir():
        run(["useradd", "--root", str(root), "--uid", str(ADMIN_UID), "--user-group", "--create-home",
             "--groups", "systemd-journal",
             "--shell", "/bin/bash", ADMIN_USER])
    ssh_dir = root / "home" / ADMIN_USER / ".ssh"
    ssh_dir.mkdir(mode=0o700, exist_ok=True)
    keys = ssh_dir / "authorized_keys"
    keys.write_text(pubkey)
    keys.chmod(0o600)
    for path in (ssh_dir, keys):
        os.chown(path, ADMIN_UID, ADMIN_UID)
    sudoers = root / "etc" / "sudoers.d" / ADMIN_USER
    sudoers.parent.mkdir(parents=True, exist_ok=True)
    sudoers.write_text(f"# Written by pdfleet sim: become for the production-shaped inventories.\n"
                       f"{ADMIN_USER} ALL=(ALL:ALL) NOPASSWD: ALL\n")
    sudoers.chmod(0o440)


def write_etc_hosts(root: Path, host: SimHost, hosts: Sequence[SimHost]) -> None:
    lines = [
        "127.0.0.1\tlocalhost",
        f"127.0.1.1\t{host.name}",
        "::1\tlocalhost ip6-localhost ip6-loopback",
        "# pdfleet sim hosts",
    ]
    lines += [f"{h.address}\t{h.name}" for h in hosts]
    (root / "etc/hosts").write_text("\n".join(lines) + "\n")


def _nspawn_cmd(machine: str, host: SimHost, root: Path, network: SimNetwork, runtime: Path | None) -> list[str]:
    cmd = [
        "systemd-nspawn",
        "--quiet",
        "--boot",
        "--register=no",
        "--keep-unit",
        f"--machine={machine}",
        f"--hostname={host.name}",
        f"--directory={root}",
        f"--network-bridge={network.bridge}",
        "--resolv-conf=copy-host",
        "--timezone=copy",
        "--console=read-only",
    ]
    cmd += [f"--bind-ro={p}" for p in image.LOCAL_PIP_DIRS if Path(p).is_dir()]
    if runtime is not None:
        cmd.append(f"--bind-ro={runtime}:{image.RUNTIME_MOUNT}")
    return cmd


def _start_host(
    state_dir: Path, host: SimHost, hosts: Sequence[SimHost], network: SimNetwork, golden: Path, runtime: Path | None
) -> None:
    machine = machine_name(state_dir, host.name)
    hdir = _host_dir(state_dir, host.name)
    _stop_host(state_dir, host.name, remove=False)  # clear whatever a crash left
    upper, work, root = hdir / "upper", hdir / "work", hdir / "root"
    first_boot = not upper.exists()
    for d in (upper, work, root):
        d.mkdir(parents=True, exist_ok=True)
    run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={golden},upperdir={upper},workdir={work}", str(root)])
    pubkey = (state_dir / f"{KEY_NAME}.pub").read_text()
    _write_host_files(root, host, hosts, network, pubkey, first_boot)
    distro.apply(root, golden, host.os, hdir / "os")
    (hdir / "host.json").write_text(
        json.dumps(
            {
                "machine": machine,
                "golden": str(golden),
                "runtime": str(runtime) if runtime else None,
            },
            indent=2,
        )
    )
    log = (hdir / "console.log").open("ab")
    try:
        proc = subprocess.Popen(
            [sys.executable, str(WRAPPER), "--", *_nspawn_cmd(machine, host, root, network, runtime)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=cgroup_joiner(machine),
            close_fds=True,
        )
    finally:
        log.close()
    (hdir / "wrapper.pid").write_text(f"{proc.pid}\n")


def _stop_host(state_dir: Path, name: str, *, remove: bool) -> None:
    """Halt the container cleanly (SIGTERM to the supervisor), then kill leftovers, unmount the overlay."""
    hdir = _host_dir(state_dir, name)
    machine = machine_name(state_dir, name)
    pid = read_pid(hdir / "wrapper.pid")
    if pid_alive(pid) and pid in cgroup_pids(machine):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)  # type: ignore[arg-type]
        wait_until(lambda: not cgroup_pids(machine), STOP_TIMEOUT_S, 0.1)
    kill_cgroup(machine)
    if pid:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)  # reap it if this process started it
    (hdir / "wrapper.pid").unlink(missing_ok=True)
    # nspawn's end of the veth pair goes away with the container's network namespace.
    veth = f"vb-{machine}"
    if not wait_until(lambda: not Path("/sys/class/net", veth).exists(), 5):
        run(["ip", "link", "delete", veth], check=False)
    unmount_all(hdir / "root")
    if remove:
        safe_rmtree(hdir)


def _wait_ready(state_dir: Path, host: SimHost, deadline: float) -> str:
    """Wait until SSH answers and systemd finished booting; return `systemctl is-system-running`."""
    while time.monotonic() < deadline:
        _, running = _host_running(state_dir, host.name)
        if not running:
            log = _host_dir(state_dir, host.name) / "console.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-10:] if log.exists() else []
            raise SimError(f"sim host {host.name} stopped while booting; console:\n" + "\n".join(tail))
        if _port_open(host.address):
            left = max(5.0, deadline - time.monotonic())
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc = ssh(state_dir, host.name, "systemctl is-system-running --wait", timeout=left)
                state = proc.stdout.strip()
                if state in ("running", "degraded"):
                    return state
        time.sleep(0.2)
    raise SimError(
        f"sim host {host.name} ({host.address}) was not SSH-ready within {READY_TIMEOUT_S:.0f} s; "
        f"see {_host_dir(state_dir, host.name) / 'console.log'}"
    )


# ---------------------------------------------------------------- public API


def up(
    hosts: Sequence[SimHost],
    network: SimNetwork,
    *,
    state_dir: Path,
    progress: Progress = _noop,
    with_runtime: bool = True,
    runtime_later: bool = False,
    cache_dir: Path = DEFAULT_CACHE_DIR,
) -> SimCluster:
    """Start the simulated hosts (idempotent: running hosts are left alone, missing ones started) and
    return once each accepts SSH and its systemd finished booting.

    With `runtime_later` the hosts start as soon as the golden image is ready, and the CPU runtime, unless
    built, builds in the background into the directory they bind (image.golden_now_runtime_later): whatever
    imports it first waits for it with image.ensure_runtime (`pdfleet sim runtime`)."""
    require_root("pdfleet sim up")
    require_tools()
    hosts = list(hosts)
    if not hosts:
        raise SimError("no sim hosts given")
    names = [h.name for h in hosts]
    for name in names:
        validate_host_name(name)
    for host in hosts:
        distro.validate_os(host.name, host.os)
    if len(set(names)) != len(names):
        raise SimError(f"sim host names repeat: {names}")
    simnet.validate(network, hosts)
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with lock_file(state_dir / "lock"):
        # Record the cluster first, so `down` can undo a partial `up` whatever happens next.
        known = _load_cluster(state_dir)
        all_hosts = list(hosts)
        if known is not None:
            old_net = SimNetwork(**known["network"])
            if old_net != network:
                raise SimError(
                    f"{state_dir} holds a sim cluster on {old_net}; run `pdfleet sim down` first "
                    "or use another state dir"
                )
            old_hosts = [SimHost(**h) for h in known["hosts"]]
            for old in old_hosts:
                new = next((h for h in hosts if h.name == old.name), None)
                if new is not None and new.address != old.address:
                    raise SimError(
                        f"sim host {old.name} already runs at {old.address}, not {new.address}; "
                        "run `pdfleet sim down` first"
                    )
                if new is None:
                    all_hosts.append(old)
            simnet.validate(network, all_hosts)
        _save_cluster(state_dir, {"network": asdict(network), "hosts": [asdict(h) for h in all_hosts]})

        if with_runtime and runtime_later:
            golden, runtime = image.golden_now_runtime_later(cache_dir, progress)
        else:
            golden, runtime = image.ensure_images(cache_dir, progress, with_runtime)
        ensure_key(state_dir)
        ssh_config = write_ssh_config(state_dir, all_hosts)
        prepare_nspawn_host()
        simnet.ensure(network)

        started = []
        for host in hosts:
            _, running = _host_running(state_dir, host.name)
            if running:
                info = json.loads((_host_dir(state_dir, host.name) / "host.json").read_text())
                wanted = {"golden": str(golden), "runtime": str(runtime) if runtime else None}
                if any(info.get(k) != v for k, v in wanted.items()):
                    progress(f"{host.name}: runs another image or runtime; `pdfleet sim down` to renew it")
                if distro.apply(_host_dir(state_dir, host.name) / "root", golden, host.os,
                                _host_dir(state_dir, host.name) / "os"):
                    progress(f"{host.name}: reports {host.os} now")
                continue
            progress(f"{host.name}: starting at {host.address}")
            _start_host(state_dir, host, all_hosts, network, golden, runtime)
            started.append(host)
        write_known_hosts(state_dir, all_hosts)
        for host in all_hosts:  # let every host resolve every other, also ones added later
            root = _host_dir(state_dir, host.name) / "root"
            if is_mountpoint(root):
                write_etc_hosts(root, host, all_hosts)

        if started:
            t0 = time.monotonic()
            deadline = t0 + READY_TIMEOUT_S
            with ThreadPoolExecutor(max_workers=len(started)) as pool:
                states = list(pool.map(lambda h: _wait_ready(state_dir, h, deadline), started))
            for host, state in zip(started, states, strict=True):
                if state != "running":
                    failed = ssh(state_dir, host.name, "systemctl --failed --no-legend --plain").stdout
                    progress(f"{host.name}: booted {state}: {failed.strip()}")
            progress(f"{len(started)} host(s) SSH-ready in {time.monotonic() - t0:.1f} s")
        else:
            progress("all sim hosts already running")

        return SimCluster(
            hosts=tuple(all_hosts),
            network=network,
            state_dir=state_dir,
            ssh_config=ssh_config,
            private_key=state_dir / KEY_NAME,
            image_dir=golden,
            runtime_dir=runtime,
            started=tuple(h.name for h in started),
        )


def down(state_dir: Path, progress: Progress = _noop) -> None:
    """Stop every host, unmount and delete the overlays, delete the bridge and the nft table, and remove
    the state dir. Safe after a partial `up`, a crash, or a second `down`."""
    require_root("pdfleet sim down")
    state_dir = state_dir.resolve()
    if not state_dir.exists():
        progress(f"nothing to tear down in {state_dir}")
        return
    aptrepo.stop(state_dir)  # the stand-in NVIDIA repository's server, if provision.yml started one
    with lock_file(state_dir / "lock"):
        known = _load_cluster(state_dir) or {}
        names = {h["name"] for h in known.get("hosts", [])}
        hosts_dir = state_dir / "hosts"
        if hosts_dir.is_dir():
            names |= {p.name for p in hosts_dir.iterdir() if p.is_dir()}
        for name in sorted(names):
            progress(f"{name}: stopping")
            _stop_host(state_dir, name, remove=True)
        if "network" in known:
            bridge = known["network"]["bridge"]
            progress(f"deleting bridge {bridge} and nft table {simnet.nft_table(bridge)}")
            simnet.remove(bridge)
        if not simnet.any_sim_tables() and not cgroup_pids(""):  # no other sim cluster or build runs
            undo_nspawn_host()
    safe_rmtree(state_dir)
    progress(f"sim cluster in {state_dir} is gone")


def status(state_dir: Path) -> list[HostStatus]:
    """One entry per host of the cluster recorded in `state_dir` (empty when there is none)."""
    state_dir = state_dir.resolve()
    known = _load_cluster(state_dir)
    if known is None:
        return []
    result = []
    for h in known["hosts"]:
        name, address = h["name"], h["address"]
        pid, running = _host_running(state_dir, name)
        info_file = _host_dir(state_dir, name) / "host.json"
        info = json.loads(info_file.read_text()) if info_file.is_file() else {}
        result.append(
            HostStatus(
                name=name,
                address=address,
                state="running" if running else "stopped",
                wrapper_pid=pid if running else None,
                init_pid=_init_pid(state_dir, name) if running else None,
                ssh_port_open=running and _port_open(address),
                memory_bytes=_memory(machine_name(state_dir, name)) if running else None,
                with_runtime=bool(info.get("runtime")),
            )
        )
    return result


def _memory(machine: str) -> int:
    """Proportional set size of every process of the host (its supervisor and nspawn included)."""
    total = 0
    for pid in cgroup_pids(machine):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
    return total
