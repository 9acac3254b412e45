"""The LocalPD journal stand-in (pdfleet_sim.testing.realwedge.FileJournal) gives the watchdog's JournalWatch what
journalctl gives it on a host: each round only the whole lines written since the previous cursor."""

from __future__ import annotations

from pathlib import Path

import pytest
from pdfleet.watchdog.journal import JournalUnavailable, JournalWatch
from pdfleet_sim.testing.realwedge import FileJournal

DEATH = ["Exception in thread Thread-2 (bootstrap_thread):", "Traceback (most recent call last):",
         "AssertionError: First message should be b'NixlMsgGuard'. Foreign traffic?"]


def test_rounds_read_only_new_whole_lines(tmp_path: Path) -> None:
    log = tmp_path / "prefill.log"
    log.write_text("[2026-01-01 00:00:00] ready\n")
    watch = JournalWatch(FileJournal({"prefill": log}))
    assert watch.scan("local", "prefill").alarming() == {}
    with log.open("a") as f:
        f.write("\n".join(DEATH[:2]) + "\n" + DEATH[2])  # the last line is still being written
    first = watch.scan("local", "prefill")
    assert first.counts["thread_death"] == 1 and first.examples == DEATH[:1]
    with log.open("a") as f:
        f.write("\n")
    again = watch.scan("local", "prefill")
    assert again.counts["thread_death"] == 2 and again.examples == [DEATH[0], DEATH[2]]
    assert watch.scan("local", "prefill").counts["thread_death"] == 2  # nothing new: nothing counted twice


def test_an_unknown_unit_is_unavailable(tmp_path: Path) -> None:
    watch = JournalWatch(FileJournal({"prefill": tmp_path / "prefill.log"}))
    with pytest.raises(JournalUnavailable, match=r"decode.*no log file"):
        watch.scan("local", "decode")
