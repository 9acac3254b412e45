"""The rollout plan (pdfleet.rollout.plan): which hosts, from -> to, strategy, batches, serving pairs, refusals,
resume order; and the report's seconds per step."""

from __future__ import annotations

import pytest
from pdfleet import fleet
from pdfleet.patch.manifest import load_manifest
from pdfleet.rollout import plan as rp
from pdfleet.rollout import report
from pdfleet.rollout.state import HostState, expected
from pdfleet.versions import OVERLAY_REQUIREMENTS

PRISTINE = expected("0.5.15.post1", False)
PATCHED = expected("0.5.15.post1", True)
NEW = expected("0.5.23", True)


def _pair(host: str) -> fleet.Pair:
    return fleet.Pair(host, (fleet.Member(f"pdfleet-prefill-{host}", "prefill", f"http://{host}:30000", host, host,
                                          8998),
                             fleet.Member(f"pdfleet-decode-{host}", "decode", f"http://{host}:30001", host, host)))


def _fleet(have: list, target=PATCHED, membership: list[str] | None = None) -> list[HostState]:
    membership = membership or ["in"] * len(have)
    return [HostState(f"node{i + 1}", h, target, _pair(f"node{i + 1}"), m)
            for i, (h, m) in enumerate(zip(have, membership, strict=True))]


def test_patch_rollout_is_host_by_host_canary_first() -> None:
    plan = rp.build(_fleet([PRISTINE] * 3))
    assert plan.strategy == "host-by-host" and plan.batches == [["node1"], ["node2"], ["node3"]]
    assert [s["serving_pairs_while_out"] for s in plan.steps] == [2, 2, 2] and not plan.refusal
    previous = plan.to_dict()["actions"]["node1"]["previous_vars"]
    m = load_manifest("0.5.15.post1")  # the sglang role's inputs that put the pristine 0.5.15.post1 back
    assert (previous["sglang_version"], previous["sglang_apply_patch"]) == ("0.5.15.post1", False)
    assert previous["sglang_patch"]["patch_id"] == "nixl-abort-v2"
    assert previous["sglang_patch"]["pristine_sha256"] == m.pristine_sha256
    assert previous["sglang_patch_file"] == str(m.patch_path) and m.patch_path.is_file()


def test_nothing_to_do() -> None:
    plan = rp.build(_fleet([PATCHED] * 3))
    assert plan.strategy == "none" and plan.hosts == [] and plan.to_dict()["nothing_to_do"]
    assert "nothing to do" in rp.table(plan)


def test_resume_puts_the_drained_host_first_and_only_readds_it_when_at_target() -> None:
    plan = rp.build(_fleet([PATCHED, PRISTINE, PATCHED], membership=["in", "in", "out"]))
    assert plan.hosts == ["node3", "node2"]
    assert plan.to_dict()["actions"]["node3"]["action"] == "readd"
    assert plan.to_dict()["actions"]["node1"]["action"] == "skip"


def test_one_pair_cluster_may_go_to_zero() -> None:
    plan = rp.build(_fleet([PRISTINE]))
    assert plan.effective_min_pairs == 0 and not plan.refusal and plan.steps[0]["serving_pairs_while_out"] == 0
    assert "min_pairs 1 (one-pair cluster: 0)" in rp.table(plan)
    assert not rp.build(_fleet([PRISTINE]), min_pairs=0).refusal  # the operator accepts the window


def test_a_min_pairs_given_is_strict() -> None:
    """min_pairs=1 on a one-pair cluster (e.g. one mono instance) is refused before anything changes, naming the
    way to accept the window; on three pairs a min_pairs they cannot keep is refused, not lowered."""
    plan = rp.build(_fleet([PRISTINE]), min_pairs=1)
    assert plan.effective_min_pairs == 1 and plan.hosts == ["node1"]
    assert plan.refusal == ("batch 1 (node1) would leave 0 serving pair(s), fewer than min_pairs=1: the cluster has "
                            "1 pair(s), so at most 0 can serve while it is out; to accept fewer (0: a window without "
                            "service), set pdfleet_rollout_min_pairs lower")
    assert "REFUSED: batch 1 (node1)" in rp.table(plan)
    plan = rp.build(_fleet([PRISTINE] * 3), min_pairs=3)
    assert "at most 2 can serve" in plan.refusal
    assert not rp.build(_fleet([PRISTINE] * 3), min_pairs=2).refusal


def test_refuses_when_too_few_pairs_would_serve() -> None:
    plan = rp.build(_fleet([PRISTINE] * 3), serial=[2], min_pairs=2)
    assert "would leave 1 serving pair(s), fewer than min_pairs=2" in plan.refusal
    plan = rp.build(_fleet([PRISTINE] * 3, membership=["in", "out", "partial"]), min_pairs=1)
    assert plan.hosts[:2] == ["node2", "node3"]
    assert "batch 1 (node2) would leave 1" not in plan.refusal  # node1 keeps serving


def test_version_change_is_a_split_swap() -> None:
    plan = rp.build(_fleet([PATCHED] * 3, target=NEW))
    assert plan.strategy == "split-swap"
    assert plan.first_half == ["node1", "node2"] and plan.second_half == ["node3"]
    assert plan.batches == [["node1"], ["node2"], ["node3"]]
    swap = next(s for s in plan.steps if s["step"] == "swap")
    assert swap["hosts_in"] == ["node1", "node2"] and swap["hosts_out"] == ["node3"]
    assert {a.host: a.readd for a in plan.actions} == {"node1": "swap", "node2": "swap", "node3": "now"}
    # a rollback installs the previous version with its own overlay in sim mode, not the target's (a version
    # swap's canary that fails its gate: 0.5.15.post1 beside 0.5.23's transformers did not start again)
    actions = plan.to_dict()["actions"]["node1"]
    assert actions["previous_vars"]["sglang_sim_packages"] == list(OVERLAY_REQUIREMENTS["0.5.15.post1"])
    assert actions["target_vars"]["sglang_sim_packages"] == list(OVERLAY_REQUIREMENTS["0.5.23"])
    assert OVERLAY_REQUIREMENTS["0.5.15.post1"] != OVERLAY_REQUIREMENTS["0.5.23"]


def test_version_change_on_one_pair_is_host_by_host() -> None:
    assert rp.build(_fleet([PATCHED], target=NEW)).strategy == "host-by-host"


@pytest.mark.parametrize(("serial", "total", "sizes"), [([1, 1], 3, [1, 1, 1]), ([1, "50%"], 5, [1, 2, 2]),
                                                        (["100%"], 3, [3]), ([1, 5], 3, [1, 2])])
def test_batch_sizes_follow_ansible_serial(serial: list, total: int, sizes: list[int]) -> None:
    assert rp.batch_sizes(serial, total) == sizes


def test_differences_name_what_changes() -> None:
    h = HostState("n", PRISTINE, PATCHED, None)
    assert "patch off -> on" in h.diffs and any("sha256" in d for d in h.diffs)
    assert HostState("n", None, PATCHED, None).diffs == ["no record (the sglang role never completed here)"]


def test_report_seconds_and_table() -> None:
    tl = {"begin": 100.0, "removed_begin": 101.0, "removed": 101.5, "idle": 104.0, "stopped": 105.0,
          "applied": 110.0, "started": 115.0, "gated": 135.0, "readded": 136.0, "end": 136.0}
    s = report.seconds(tl)
    assert s["drained"] == 1.5 and s["idle"] == 2.5 and s["gated"] == 20.0 and s["out_of_router"] == 35.0
    data = report.build({"order": ["node1"], "strategy": "host-by-host"}, {"node1": tl}, {"ok": True}, 90.0, 140.0,
                        one_pair=True)
    assert data["sum_gates_s"] == 20.0 and data["ratio_total_to_gates"] == 2.5
    assert data["window_without_service_s"] == {"node1": 35.0} and "node1" in "\n".join(data["table"])
