"""`pdfleet ops restart` never takes a pair out of the router unless it can restart it: a non-root SSH user whose
sudo asks for a password is refused before the drain, naming the host; with root or passwordless sudo the
systemctl and journal commands run with those rights; a restart or gate that fails after the drain says the pair
is still out of the router and how to bring it back (issue 30). Real steps, fake hosts and router."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from pdfleet import fleet
from pdfleet.fleet.load import IdleResult
from pdfleet.ops.restart import RestartSteps, restart_pair
from pdfleet.ops.tasks import FAILED, OK
from pdfleet.privilege import SUDO, privileged
from pdfleet.watchdog.actions import RestartError, restart_commands

from ops.fakes import LoggedActions

PAIR = fleet.Pair("node2", (fleet.Member("pdfleet-prefill1", "prefill", "http://10.77.0.12:30000", host="node2"),
                            fleet.Member("pdfleet-decode1", "decode", "http://10.77.0.12:30001", host="node2")))


@dataclass
class Host:
    """A host's answer to the access probe, and every command it was sent."""

    uid: str = "0"
    sudo: bool = False
    commands: list[str] = field(default_factory=list)

    def run(self, host: str, command: str) -> tuple[int, str, str]:
        assert host == "node2"
        self.commands.append(command)
        if command.startswith("id -u;"):
            return 0, f"{self.uid}\n{'sudo' if self.sudo else 'nosudo'}\n", ""
        if self.uid != "0" and not command.startswith(SUDO):
            return 1, "", "Failed to restart: Interactive authentication required."
        return 0, "", ""


@dataclass
class Actions(LoggedActions):
    """The watchdog's steps, recording what ran; restart sends the real systemctl commands."""

    run: object = None

    def restart(self, pair: fleet.Pair) -> None:
        for m in pair.members:
            for cmd in restart_commands(m.name):
                rc, _, err = self.run(m.host, cmd)  # type: ignore[operator]
                if rc != 0:
                    raise RestartError(f"{m.name} on {m.host}: `{cmd}` exited {rc}: {err}")
        self.log.append("restart")


def _steps(log: list[str], gate_ok: bool = True) -> RestartSteps:
    def drain(pair: fleet.Pair) -> fleet.DrainResult:
        log.append("drain")
        return fleet.DrainResult(pair.host, [], IdleResult(True, 0.1, []), 0.1)

    return RestartSteps(drain=drain, actions=lambda run: Actions(log, gate_ok, run), warn=log.append,
                        drain_timeout_s=120)


def test_a_user_who_cannot_restart_is_refused_before_the_drain() -> None:
    host, log = Host(uid="1001", sudo=False), []
    line = restart_pair(PAIR, host.run, _steps(log))
    assert line.code == FAILED and log == [], (line, log)
    assert "nothing drained" in line.text and "host node2" in line.text and "uid 1001" in line.text
    assert "passwordless sudo" in line.text
    assert not any("systemctl" in c for c in host.commands)


@pytest.mark.parametrize(("uid", "sudo", "prefixed"), [("0", False, False), ("1001", True, True)])
def test_root_or_passwordless_sudo_restarts_with_those_rights(uid: str, sudo: bool, prefixed: bool) -> None:
    host, log = Host(uid=uid, sudo=sudo), []
    line = restart_pair(PAIR, host.run, _steps(log))
    assert line.code == OK and log == ["drain", "restart", "gate", "readd"], (line, log)
    restarts = [c for c in host.commands if "systemctl" in c]
    assert len(restarts) == 4 and all(c.startswith(SUDO) == prefixed for c in restarts), restarts


def test_without_the_access_check_the_same_user_would_be_stuck_out_of_the_router() -> None:
    """The bad case the check prevents: the unprivileged commands fail after the drain, and the line says so."""
    host, log = Host(uid="1001", sudo=True), []
    steps = _steps(log)
    steps.actions = lambda run: Actions(log, run=host.run)  # the runner without sudo
    line = restart_pair(PAIR, host.run, steps)
    assert line.code == FAILED and log == ["drain"], (line, log)
    assert "Interactive authentication required" in line.text and "OUT of the router" in line.text
    assert "pdfleet ops undrain node2" in line.text


def test_a_failed_gate_says_the_pair_is_out_and_how_to_bring_it_back() -> None:
    log: list[str] = []
    line = restart_pair(PAIR, Host().run, _steps(log, gate_ok=False))
    assert line.code == FAILED and log == ["drain", "restart", "gate"]
    assert "canary: no tokens" in line.text and "OUT of the router" in line.text


def test_privileged_runs_compound_commands_whole_under_sudo() -> None:
    sent: list[str] = []
    run = privileged(lambda h, c: (sent.append(c), (0, "", ""))[1], {"node2": SUDO})
    run("node2", "inv=$(systemctl show -p InvocationID --value u) && journalctl _SYSTEMD_INVOCATION_ID=\"$inv\"")
    assert sent == ["sudo -n sh -c 'inv=$(systemctl show -p InvocationID --value u) && "
                    "journalctl _SYSTEMD_INVOCATION_ID=\"$inv\"'"]
