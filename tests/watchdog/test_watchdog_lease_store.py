"""Where `pdfleet watchdog run` takes its pair leases: none in alert mode; in this process for the deployed unit
(--plan, on the router host); on the router host over SSH for a watchdog run from the control machine (-i), as root
or through `sudo -n`, refused at start, naming the host, when the SSH user has neither. Its unit restarts on other
hosts run the same way."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from pdfleet.lease_client import LocalLeases, RemoteLeases
from pdfleet.privilege import ACCESS_PROBE
from pdfleet.watchdog import cli
from pdfleet.watchdog.actions import RestartError


def _args(remediation: str, plan: Path | None = None, local_host: str = "") -> argparse.Namespace:
    return argparse.Namespace(remediation=remediation, plan=plan, local_host=local_host, inventory=Path("inv"),
                              lease_dir=Path("/var/lib/pdfleet-leases"))


def test_alert_mode_takes_no_lease_and_the_deployed_unit_takes_them_locally() -> None:
    assert cli._leases(_args("alert"), "router1") is None
    local = cli._leases(_args("restart", Path("/etc/pdfleet-watchdog/plan.json"), "router1"), "router1")
    assert isinstance(local, LocalLeases) and local.kind == "watchdog"


@pytest.mark.parametrize(("uid", "sudo", "prefix"), [("0", "nosudo", ""), ("1001", "sudo", "sudo -n ")])
def test_from_the_control_machine_the_leases_are_on_the_router_host(monkeypatch: pytest.MonkeyPatch, uid: str,
                                                                    sudo: str, prefix: str) -> None:
    asked: list[str] = []

    def ssh(host: str, command: str) -> tuple[int, str, str]:
        asked.append(host)
        return 0, f"{uid}\n{sudo}\n", ""

    monkeypatch.setattr(cli, "_ssh_runner", lambda source: ssh)
    monkeypatch.setattr(cli, "source_from_args", lambda args: None)
    store = cli._leases(_args("restart"), "router1")
    assert isinstance(store, RemoteLeases) and (store.host, store.kind, store.prefix) == ("router1", "watchdog", prefix)
    assert asked == ["router1"]


def test_a_control_machine_user_without_rights_on_the_router_host_is_refused_at_start(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_ssh_runner", lambda source: lambda host, command: (0, "1001\nnosudo\n", ""))
    monkeypatch.setattr(cli, "source_from_args", lambda args: None)
    with pytest.raises(cli.WatchdogUsageError, match=r"pair leases on the router host: host router1: .*uid 1001"):
        cli._leases(_args("restart"), "router1")


@pytest.mark.parametrize(("uid", "sudo", "sent"), [
    ("0", "nosudo", "systemctl --no-ask-password restart pdfleet-prefill1"),
    ("1001", "sudo", "sudo -n sh -c 'systemctl --no-ask-password restart pdfleet-prefill1'"),
])
def test_units_on_other_hosts_restart_as_root_or_through_sudo(monkeypatch: pytest.MonkeyPatch, uid: str, sudo: str,
                                                              sent: str) -> None:
    """Run from the control machine (-i) as the production-shaped operator (not root, sudo without a password): the
    restart's systemctl runs through `sudo -n`, as `pdfleet ops restart` does (plain, it fails with "Interactive
    authentication required" / "Access denied"); the host is asked once."""
    commands: list[tuple[str, str]] = []

    def ssh(host: str, command: str) -> tuple[int, str, str]:
        commands.append((host, command))
        return (0, f"{uid}\n{sudo}\n", "") if command == ACCESS_PROBE else (0, "", "")

    monkeypatch.setattr(cli, "_ssh_runner", lambda source: ssh)
    monkeypatch.setattr(cli, "source_from_args", lambda args: None)
    args = argparse.Namespace(**vars(_args("restart")), journal="auto")
    _, _, shell = cli._runners(args)
    for _ in range(2):
        assert shell("node2", "systemctl --no-ask-password restart pdfleet-prefill1") == (0, "", "")
    assert commands == [("node2", ACCESS_PROBE), ("node2", sent), ("node2", sent)]


def test_a_restart_on_a_host_where_the_operator_has_no_rights_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_ssh_runner", lambda source: lambda host, command: (0, "1001\nnosudo\n", ""))
    monkeypatch.setattr(cli, "source_from_args", lambda args: None)
    _, _, shell = cli._runners(argparse.Namespace(**vars(_args("restart")), journal="auto"))
    with pytest.raises(RestartError, match=r"cannot restart units on node2: host node2: the SSH user \(uid 1001\)"):
        shell("node2", "systemctl --no-ask-password restart pdfleet-prefill1")
