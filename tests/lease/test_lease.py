"""The pair lease store (pdfleet.lease): one holder at a time, the holder's own kind may take it again, a record past
its expiry may be taken, takeover entries, atomic records, and real processes racing for one pair (exactly one
wins). Its script form (what runs on the gateway host) answers in JSON with the exit codes it documents."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pdfleet import lease
from pdfleet.lease import LeaseError, LeaseHeld


def test_a_held_pair_is_refused_to_another_actor_naming_holder_purpose_and_fix(tmp_path: Path) -> None:
    lease.acquire("node2", "ops", "drain", who="alice@ctl pid 7", directory=tmp_path, now=1000.0)
    with pytest.raises(LeaseHeld) as e:
        lease.acquire("node2", "watchdog", "restart", who="wd", ttl_s=300, directory=tmp_path, now=1001.0)
    text = str(e.value)
    assert "pair node2" in text and "ops (alice@ctl pid 7) for drain" in text and "no expiry" in text
    assert "pdfleet ops undrain node2" in text
    assert lease.read("node2", tmp_path).kind == "ops"  # untouched
    # another pair is free
    assert lease.acquire("node3", "watchdog", "restart", who="wd", directory=tmp_path)[0].pair == "node3"


def test_the_same_kind_takes_it_again_and_a_renewal_keeps_since(tmp_path: Path) -> None:
    lease.acquire("n", "rollout", "rollout", who="r1", ttl_s=100, directory=tmp_path, now=10.0)
    renewed, prev = lease.acquire("n", "rollout", "rollout", who="r1", ttl_s=100, directory=tmp_path, now=50.0)
    assert prev is not None and renewed.since == 10.0 and renewed.expires == 150.0
    rerun, _ = lease.acquire("n", "rollout", "rollout", who="r2", directory=tmp_path, now=60.0)  # a rerun
    assert rerun.who == "r2" and rerun.since == 60.0 and rerun.expires is None


def test_an_expired_lease_may_be_taken_and_one_without_expiry_never_expires(tmp_path: Path) -> None:
    lease.acquire("n", "watchdog", "restart", who="wd", ttl_s=300, directory=tmp_path, now=0.0)
    with pytest.raises(LeaseHeld):
        lease.acquire("n", "rollout", "rollout", directory=tmp_path, now=299.0)
    assert lease.acquire("n", "rollout", "rollout", directory=tmp_path, now=300.0)[0].kind == "rollout"
    lease.acquire("m", "ops", "drain", directory=tmp_path, now=0.0)
    with pytest.raises(LeaseHeld):
        lease.acquire("m", "watchdog", "restart", directory=tmp_path, now=10.0**9)


def test_an_ops_command_at_work_is_kept_from_other_ops_commands(tmp_path: Path) -> None:
    """An ops lease with an expiry (restart, undrain at work) is its holder's alone; a drain (no expiry) is any
    person's; ``who:<holder>`` and "*" take over; an expired one is free."""
    lease.acquire("n", "ops", "restart", who="alice@a pid 1", ttl_s=600, directory=tmp_path, now=0.0)
    for attempt in (lambda: lease.acquire("n", "ops", "restart", who="bob@b pid 2", ttl_s=600, directory=tmp_path,
                                          now=1.0),
                    lambda: lease.release("n", "ops", who="bob@b pid 2", directory=tmp_path, now=1.0)):
        with pytest.raises(LeaseHeld, match=r"another `pdfleet ops restart` is working on the pair"):
            attempt()
    assert lease.read("n", tmp_path).who == "alice@a pid 1"
    assert lease.acquire("n", "ops", "restart", who="alice@a pid 1", ttl_s=600, directory=tmp_path,
                         now=2.0)[0].since == 0.0  # her own renewal
    assert lease.acquire("n", "ops", "undrain", who="bob@b pid 2", takeover=["who:alice@a pid 1"],
                         directory=tmp_path, now=3.0)[0].who == "bob@b pid 2"
    lease.acquire("n", "ops", "drain", who="carol@c pid 3", directory=tmp_path, now=4.0)
    assert lease.release("n", "ops", who="bob@b pid 2", directory=tmp_path, now=5.0).who == "carol@c pid 3"
    lease.acquire("n", "ops", "restart", who="alice@a pid 1", ttl_s=10, directory=tmp_path, now=0.0)
    assert lease.acquire("n", "ops", "restart", who="bob@b pid 2", directory=tmp_path, now=10.0)[0].who == "bob@b pid 2"


def test_gone_here_is_only_this_users_finished_process_on_this_machine(tmp_path: Path) -> None:
    me = lease.who_am_i().rpartition(" pid ")[0]
    proc = subprocess.Popen(["true"])
    proc.wait()
    held = lease.acquire("n", "ops", "restart", who=f"{me} pid {proc.pid}", ttl_s=60, directory=tmp_path)[0]
    assert lease.gone_here(held)
    for who in (f"{me} pid 1", lease.who_am_i(), f"someone@elsewhere pid {proc.pid}", "watchdog"):
        assert not lease.gone_here(lease.Lease("n", "ops", who, "restart", 0.0, 60.0)), who


def test_release_refuses_another_actor_unless_taken_over(tmp_path: Path) -> None:
    lease.acquire("n", "watchdog", "left_out", who="wd", directory=tmp_path)
    with pytest.raises(LeaseHeld):
        lease.release("n", "ops", directory=tmp_path)
    with pytest.raises(LeaseHeld):
        lease.release("n", "ops", takeover=["watchdog:restart"], directory=tmp_path)  # another purpose
    assert lease.release("n", "ops", takeover=["watchdog:left_out"], directory=tmp_path).kind == "watchdog"
    assert lease.read("n", tmp_path) is None and lease.release("n", "ops", directory=tmp_path) is None
    lease.acquire("n", "rollout", "rollout", directory=tmp_path)
    assert lease.release("n", "ops", takeover=["*"], directory=tmp_path) is not None  # an operator's override


def test_records_are_whole_json_and_a_damaged_one_is_named(tmp_path: Path) -> None:
    lease.acquire("n", "ops", "drain", who="a", directory=tmp_path, now=5.0)
    assert json.loads((tmp_path / "n.json").read_text()) == {"pair": "n", "kind": "ops", "who": "a",
                                                               "purpose": "drain", "since": 5.0, "expires": None,
                                                               "in_gateway": False}
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".n.json")] == []  # no temp file left
    (tmp_path / "n.json").write_text("{half")
    with pytest.raises(LeaseError, match=r"n\.json is unreadable"):
        lease.acquire("n", "ops", "drain", directory=tmp_path)
    with pytest.raises(LeaseError, match="not a pair"):
        lease.acquire("../etc", "ops", "drain", directory=tmp_path)
    with pytest.raises(LeaseError, match="kind"):
        lease.acquire("x", "person", "drain", directory=tmp_path)


def test_a_missing_store_is_named_with_its_fix_for_a_user_who_cannot_create_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lease.os, "geteuid", lambda: 1000)
    with pytest.raises(LeaseError, match=r"lease directory .*missing.*site\.yml --tags watchdog"):
        lease.acquire("n", "watchdog", "restart", directory=tmp_path / "absent")
    assert lease.read_all(tmp_path / "absent") == [] and lease.release("n", "ops", directory=tmp_path / "x") is None


RACER = """
import sys, time
from pathlib import Path
from pdfleet import lease
directory, kind, start = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
write = lease._write
def slow_write(path, record):  # widen the window between reading "free" and writing the record
    time.sleep(0.3)
    write(path, record)
lease._write = slow_write
while time.time() < start:
    pass
try:
    lease.acquire("node2", kind, "race", who=kind, directory=directory)
    print("won")
except lease.LeaseHeld:
    print("lost")
"""


@pytest.mark.parametrize("round_", range(2))
def test_processes_racing_for_one_pair_exactly_one_wins(tmp_path: Path, round_: int) -> None:
    """One process per actor, started at the same instant; each writes slowly after finding the pair free. Without
    the lock every one of them finds it free and wins."""
    import os
    import time

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    start = time.time() + 1.5
    procs = {k: subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path), k, str(start)],
                                 stdout=subprocess.PIPE, text=True, env=env) for k in lease.KINDS}
    results = {k: p.communicate(timeout=60)[0].strip() for k, p in procs.items()}
    winners = [k for k, r in results.items() if r == "won"]
    assert len(winners) == 1 and sorted(results.values()) == ["lost", "lost", "won"], results
    held = lease.read("node2", tmp_path)
    assert held is not None and held.kind == winners[0]


def test_the_script_form_answers_json_with_its_exit_codes(tmp_path: Path) -> None:
    def run(request: dict) -> tuple[int, dict]:
        argv = lease.remote_argv({**request, "dir": str(tmp_path), "owner_dir": str(tmp_path)},
                                 python=sys.executable)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
        return proc.returncode, json.loads(proc.stdout)

    rc, out = run({"op": "acquire", "pair": "n", "kind": "ops", "purpose": "drain", "who": "a@b pid 1"})
    assert rc == 0 and out["ok"] and out["lease"]["who"] == "a@b pid 1"
    rc, out = run({"op": "check", "pair": "n", "kind": "rollout", "purpose": "rollout"})
    assert rc == 1 and out["error"] == "held" and "ops (a@b pid 1)" in out["message"]
    rc, out = run({"op": "acquire", "pair": "n", "kind": "rollout", "purpose": "rollout"})
    assert rc == 1 and lease.read("n", tmp_path).kind == "ops"
    rc, out = run({"op": "list"})
    assert rc == 0 and [x["pair"] for x in out["leases"]] == ["n"]
    rc, out = run({"op": "release", "pair": "n", "kind": "ops"})
    assert rc == 0 and out["changed"] and lease.read("n", tmp_path) is None
    rc, out = run({"op": "acquire", "pair": "n"})
    assert rc == 2 and out["error"] == "store"
    argv = lease.remote_argv({"op": "list"}, python=sys.executable)  # no "dir": the caller must name the store
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "'dir'" in json.loads(proc.stdout)["message"]
