"""Errors a person can act on: each names where the problem is and how to fix it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One rule violation in the inventory model."""

    variable: str
    message: str
    fix: str
    host: str = ""

    def __str__(self) -> str:
        where = f"host {self.host}: " if self.host else ""
        return f"{where}{self.variable}: {self.message} (fix: {self.fix})"


class PdfleetError(Exception):
    """Base class for errors the CLI turns into exit codes."""

    exit_code = 2


class InventoryError(PdfleetError):
    """The inventory could not be read (missing file, bad YAML, missing variable)."""


class PlanError(PdfleetError):
    """The inventory model breaks one or more rules; every problem is reported at once."""

    def __init__(self, problems: list[Problem], source: str = "") -> None:
        self.problems = problems
        self.source = source
        head = f"{len(problems)} problem(s) in the inventory model"
        if source:
            head += f" ({source})"
        super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in problems))
