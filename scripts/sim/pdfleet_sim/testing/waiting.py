"""Synchronise a test with a condition, not a clock: poll until it holds or a deadline passes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class NotInTime(AssertionError):
    """The condition did not hold before the deadline; the message says which condition and how long."""


def wait_until(what: str, condition: Callable[[], T], timeout_s: float, interval_s: float = 0.1,
               detail: Callable[[], object] | None = None) -> T:
    """Call ``condition`` every ``interval_s`` until it returns something true, and return that; raise
    :class:`NotInTime` naming ``what`` (and ``detail()``, if given) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            extra = f": {detail()}" if detail is not None else ""
            raise NotInTime(f"{what}: not within {timeout_s:g} s{extra}")
        time.sleep(interval_s)
