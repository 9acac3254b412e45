"""The verify play's journal collection: the host half (read, standard library only) and the control half (write)
give the layout `pdfleet verify --resume --journal-dir` reads; a journalctl failure is reported, not hidden."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pdfleet.verify import journaldump
from pdfleet.verify.logs import JournalDirLogs, LogUnavailable
from pdfleet.verify.targets import Worker

SOURCE = Path(journaldump.__file__).read_text()

FAKE_JOURNALCTL = """#!/bin/sh
# -u UNIT --since @EPOCH ... | _SYSTEMD_INVOCATION_ID=ID --until @EPOCH ...
case "$1" in
  -u) [ "$2" = pdfleet-broken ] && { echo "journal corrupt" >&2; exit 1; }
      echo "since $2 $4"; echo "ABORT handled";;
  _SYSTEMD_INVOCATION_ID=*) echo "before ${1#_SYSTEMD_INVOCATION_ID=} $3";;
esac
"""
FAKE_SYSTEMCTL = """#!/bin/sh
# show -p InvocationID --value UNIT: units named *-gone have no invocation id
case "$5" in *-gone) echo "";; *) echo "id-$5";; esac
"""


@pytest.fixture
def fake_host(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("journalctl", FAKE_JOURNALCTL), ("systemctl", FAKE_SYSTEMCTL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}")


def run_read(env: dict[str, str], units: list[str], since: int, cwd: Path) -> subprocess.CompletedProcess:
    """As the play runs it on a host (pdfleet_probe): `python3 -I -c SOURCE`, the settings as one JSON line on
    stdin, isolated from pdfleet's import path."""
    return subprocess.run([sys.executable, "-I", "-c", SOURCE], input=json.dumps({"units": units, "since": since})
                          + "\n", env=env, cwd=cwd, capture_output=True, text=True, check=False)


def test_read_on_a_host_without_pdfleet_then_write_gives_the_resume_layout(fake_host: dict[str, str],
                                                                              tmp_path: Path) -> None:
    proc = run_read(fake_host, ["pdfleet-prefill0", "pdfleet-decode0-gone"], 1700000000, tmp_path)
    assert proc.returncode == 0, proc.stderr
    dumps = json.loads(proc.stdout)
    assert dumps["pdfleet-prefill0"] == {"since": "since pdfleet-prefill0 @1700000000\nABORT handled",
                                         "before": "before id-pdfleet-prefill0 @1700000000", "error": ""}
    assert dumps["pdfleet-decode0-gone"]["before"] is None  # no invocation id: no "before" dump

    out = tmp_path / "reports" / "verify-x-journal"
    (tmp_path / "reports").mkdir()
    written = journaldump.write(str(out), {"node1": dumps})
    assert len(written) == 3
    assert oct(out.stat().st_mode & 0o777) == "0o750"
    assert oct((out / "node1" / "pdfleet-prefill0.log").stat().st_mode & 0o777) == "0o640"

    logs = JournalDirLogs(out)
    prefill = Worker(name="pdfleet-prefill0", host="node1", role="prefill", url="http://127.0.0.1:1")
    decode = Worker(name="pdfleet-decode0-gone", host="node1", role="decode", url="http://127.0.0.1:2")
    assert logs.read(prefill) == "since pdfleet-prefill0 @1700000000\nABORT handled\n"
    assert logs.read_before(prefill) == "before id-pdfleet-prefill0 @1700000000\n"
    assert logs.read(decode).startswith("since pdfleet-decode0-gone @1700000000\n")
    with pytest.raises(LogUnavailable):
        logs.read_before(decode)


def test_a_journalctl_failure_is_named_in_the_dump(fake_host: dict[str, str], tmp_path: Path) -> None:
    """The play fails the host on any error (failed_when), so an unreadable journal never reads as a clean one."""
    proc = run_read(fake_host, ["pdfleet-broken"], 1, tmp_path)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["pdfleet-broken"]["error"] == "journal corrupt"


def test_write_refuses_what_is_not_the_read_steps_json(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pdfleet.verify.journaldump", "write", str(tmp_path / "j")],
                          input="not json", capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "not the JSON of the read step" in proc.stderr
    assert not (tmp_path / "j").exists()
