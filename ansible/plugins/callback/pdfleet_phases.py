"""Callback pdfleet.cluster.pdfleet_phases: at the end of a playbook run, each play's wall time, so `make site`
says where its minutes went (the sim hosts, the wheel, provisioning, the deploy, the watchdog, verification).

Enabled in ansible.cfg next to pdfleet_preload; prints nothing else and changes nothing. Silent when the output
is for machines (a stdout callback other than the default, e.g. ansible.posix.json).
"""

from __future__ import annotations

DOCUMENTATION = """
name: pdfleet_phases
type: aggregate
short_description: print each play's wall time at the end of a run
description:
  - Records when each play starts and prints one line per play (its name and seconds) and the total after the
    recap.
requirements:
  - enabled in ansible.cfg (callbacks_enabled = pdfleet.cluster.pdfleet_phases)
"""

# The imports follow the documentation (ansible-test sanity: import-before-documentation).
import time  # noqa: E402
from typing import Any  # noqa: E402

from ansible import constants as C  # noqa: E402
from ansible.plugins.callback import CallbackBase  # noqa: E402

HUMAN_STDOUT = ("default", "ansible.builtin.default")


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "pdfleet.cluster.pdfleet_phases"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._started = time.monotonic()
        self._plays: list[tuple[str, float]] = []  # (name, start)

    def v2_playbook_on_play_start(self, play: Any) -> None:
        self._plays.append((play.get_name().strip() or "(unnamed play)", time.monotonic()))

    def phases(self, end: float) -> list[tuple[str, float]]:
        """(play, seconds) in the order the plays ran."""
        starts = [start for _, start in self._plays] + [end]
        return [(name, starts[i + 1] - start) for i, (name, start) in enumerate(self._plays)]

    def v2_playbook_on_stats(self, stats: Any) -> None:
        end = time.monotonic()
        if not self._plays or C.DEFAULT_STDOUT_CALLBACK not in HUMAN_STDOUT:
            return
        width = min(90, max(len(name) for name, _ in self._plays))
        self._display.display("pdfleet: time per play")
        for name, seconds in self.phases(end):
            self._display.display(f"  {name[:width]:<{width}}  {seconds:7.1f} s")
        self._display.display(f"  {'total':<{width}}  {end - self._started:7.1f} s")
