"""Test doubles shared by the ops tests: the watchdog's pair steps (restart, gate, re-add), recording what ran."""

from __future__ import annotations

from dataclasses import dataclass

from pdfleet import fleet


@dataclass
class LoggedActions:
    """Each step appends its name to ``log``; the gate passes unless ``gate_ok`` is false; the re-add confirms."""

    log: list[str]
    gate_ok: bool = True

    def restart(self, pair: fleet.Pair) -> None:
        self.log.append("restart")

    def gate(self, pair: fleet.Pair) -> tuple[bool, str]:
        self.log.append("gate")
        return (True, "gate passed") if self.gate_ok else (False, "canary: no tokens")

    def readd(self, pair: fleet.Pair, specs: list[fleet.WorkerSpec] | None) -> tuple[bool, str]:
        self.log.append("readd")
        return True, "confirmed after 1 probe(s)"
