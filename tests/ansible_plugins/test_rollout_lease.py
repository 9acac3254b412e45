"""The rollout's pair lease (issue 30 item 5): rollout_hosts.yml takes the host's pair lease on the router host
before the drain and refuses the host, pair untouched, naming the holder, when another actor holds it; it releases
the lease after the re-add (and in the drain's rescue), the rollback releases or keeps it, and a split-fleet swap
takes the second half's before the swap and releases the first half's after. The take and refuse tasks are run
here as written (on this machine, against a tmp store), through the pdfleet_lease_argv filter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from pdfleet import lease
from pdfleet.paths import REPO_ROOT

BIN = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin"
PLAYBOOKS = REPO_ROOT / "ansible" / "playbooks"


def _play() -> dict[str, Any]:
    return yaml.safe_load((PLAYBOOKS / "rollout_hosts.yml").read_text())[0]


def _names(tasks: list[dict[str, Any]]) -> list[str]:
    return [t["name"] for t in tasks]


def _index(tasks: list[dict[str, Any]], start: str) -> int:
    return next(i for i, t in enumerate(tasks) if t["name"].startswith(start))


def test_the_lease_is_taken_and_checked_before_the_drain_and_released_after_the_readd() -> None:
    play = _play()
    pre = play["pre_tasks"]
    take, refuse, drain = _index(pre, "Take this pair's lease"), _index(pre, "Refuse this host"), _index(pre, "Drain")
    assert take < refuse < drain, _names(pre)
    argv = pre[take]["ansible.builtin.command"]["argv"]
    assert "__pdfleet_rollout_lease_take | pdfleet.cluster.pdfleet_lease_argv" in argv
    assert pre[take]["delegate_to"] == "{{ __pdfleet_rollout_gateway }}" and pre[take]["become"] is True
    assert play["vars"]["__pdfleet_rollout_gateway"] == "{{ groups['pdfleet_router_host'] | first }}"
    assert pre[refuse]["ansible.builtin.assert"]["that"] == "pdfleet_rollout_lease.rc == 0"
    rescue = pre[drain]["rescue"]
    assert _index(rescue, "Put the untouched pair back") < _index(rescue, "Release the pair's lease") \
        < _index(rescue, "Stop the rollout")
    post = play["post_tasks"]
    assert len(post) == 1 and "__pdfleet_rollout_lease_release" in post[0]["ansible.builtin.command"]["argv"]
    assert "__pdfleet_rollout_action.readd == 'now'" in post[0]["when"]


def test_the_rollback_releases_a_pair_back_in_the_router_and_keeps_one_left_out() -> None:
    tasks = yaml.safe_load((PLAYBOOKS / "tasks" / "rollout_rollback.yml").read_text())
    block = _index(tasks, "Rollback | restore the previous record")
    leased = _index(tasks, "Rollback | the pair's lease")
    assert block < leased < _index(tasks, "Rollback | stop the rollout")
    argv = tasks[leased]["ansible.builtin.command"]["argv"]
    assert "__pdfleet_rollout_lease_release if pdfleet_rollout_rolled_back" in argv and "'ttl_s': none" in argv
    assert "keeps its pair's" in tasks[-1]["ansible.builtin.fail"]["msg"]


def test_a_split_fleet_swap_takes_the_second_half_before_and_releases_the_first_half_after() -> None:
    plays = yaml.safe_load((REPO_ROOT / "rollout.yml").read_text())
    swap = next(p for p in plays if p.get("name", "").startswith("Rollout | split-fleet swap"))
    names = _names(swap["tasks"])
    take, do, release = (_index(swap["tasks"], s) for s in ("Take the leases", "Swap the router", "Release the leases"))
    assert take < do < release, names
    assert swap["tasks"][take]["loop"] == "{{ __pdfleet_rollout_second_pairs }}"
    assert swap["tasks"][release]["loop"] == "{{ __pdfleet_rollout_first_pairs }}"


def _run_take(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """The play's own take and refuse tasks on this machine, with the play's own request (its store: tmp_path)."""
    play = _play()
    pre = play["pre_tasks"]
    tasks = [dict(pre[_index(pre, "Take this pair's lease")]), dict(pre[_index(pre, "Refuse this host")])]
    for t in tasks:
        t.pop("delegate_to", None)
        t.pop("become", None)
    argv = tasks[0]["ansible.builtin.command"]["argv"]
    tasks[0]["ansible.builtin.command"] = {"argv": argv.replace(
        "__pdfleet_rollout_lease_take |", "__pdfleet_rollout_lease_take | combine({'dir': lease_dir}) |")}
    test_play = [{"name": "The rollout's lease tasks", "hosts": "localhost", "connection": "local",
                  "gather_facts": False,
                  "vars": {"lease_dir": str(tmp_path), "__pdfleet_rollout_has_pair": True,
                           "__pdfleet_rollout_pair": {"host": "node2"}, "__pdfleet_rollout_gateway": "router1",
                           "__pdfleet_rollout_lease_take": play["vars"]["__pdfleet_rollout_lease_take"]},
                  "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(test_play))
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


@pytest.mark.parametrize("held_by", [None, "watchdog", "rollout"])
def test_the_take_task_takes_a_free_pair_and_refuses_one_the_watchdog_holds(tmp_path: Path,
                                                                            held_by: str | None) -> None:
    if held_by is not None:
        lease.acquire("node2", held_by, "restart", who=f"{held_by}@gw pid 4", ttl_s=300, directory=tmp_path)
    proc = _run_take(tmp_path)
    out = proc.stdout + proc.stderr
    held = lease.read("node2", tmp_path)
    if held_by == "watchdog":  # refused, naming the holder; its lease untouched
        assert proc.returncode != 0, out
        assert "localhost: rollout refused, the pair untouched (router host router1)" in " ".join(out.split())
        assert "watchdog (watchdog@gw pid 4) for restart" in out
        assert held is not None and held.kind == "watchdog"
        return
    assert proc.returncode == 0, out[-3000:]  # free, or a rollout's (a rerun takes it over)
    assert held is not None and (held.kind, held.purpose) == ("rollout", "rollout") and held.expires is not None
    assert 7000 < held.expires - time.time() <= 7200
    who = json.loads((tmp_path / "node2.json").read_text())["who"]
    assert "@" in who and " pid " in who  # the filter named this controller's user, machine and process
