"""mono-tp8, the non-PD fallback, on a scratch copy of inventory/sim-mono: site.yml converges it and its own
verification passes, at the protocol's defaults and with 10 x 250 cascades; the sessions killed while queued are
dropped by the worker without being computed (issue 14). Both are `long` (a converge alone takes ~5 min here);
the stand-in behaviour they rest on is covered in the default run by tests/simworker/test_disconnect.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from pdfleet.paths import REPO_ROOT
from simcluster import SITE, ScratchCluster, recap, scratch_cluster, skip_reason

pytestmark = [pytest.mark.sim, pytest.mark.slow]

MONO_INVENTORY = REPO_ROOT / "inventory" / "sim-mono"


@pytest.fixture(scope="module")
def mono_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScratchCluster]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    with scratch_cluster(tmp_path_factory.mktemp("simmono"), source=MONO_INVENTORY) as cluster:
        yield cluster


def _worker_state(cluster: ScratchCluster) -> dict:
    out = cluster.ssh(f"curl -sf http://{cluster.address}:30000/pdfleet/sim")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _site_with_verify(cluster: ScratchCluster, verify_args: list[str]) -> tuple[dict, dict, dict, float]:
    """site.yml with these `pdfleet verify` arguments: (report, worker state before, after, seconds)."""
    before = _worker_state(cluster) if cluster.state_dir.joinpath("ssh_config").is_file() else {}
    t0 = time.monotonic()
    proc = cluster.playbook(SITE, "-e", json.dumps({"pdfleet_verify_args": verify_args}), check=False)
    seconds = time.monotonic() - t0
    assert proc.returncode == 0, f"site.yml failed (rc {proc.returncode}):\n{proc.stdout[-6000:]}\n{proc.stderr}"
    assert recap(proc.stdout, "node1")["failed"] == 0
    return cluster.latest_report(), before, _worker_state(cluster), seconds


def _assert_passed_and_queued_dropped(report: dict, before: dict, after: dict) -> None:
    checks = {c["name"]: c for c in report["checks"]}
    statuses = {n: c["status"] for n, c in checks.items()}
    # A scratch cluster has no saved throughput baseline: the benchmark measures and says so.
    assert statuses.pop("bench") in ("pass", "no-baseline"), json.dumps(checks["bench"])[:2000]
    assert statuses == dict.fromkeys(("config", "liveness", "cascade", "recovery", "logs"), "pass"), \
        json.dumps(report["checks"])[:4000]
    assert report["target"]["workers"][0]["role"] == "mono"
    killed = checks["cascade"]["measured"]["killed"]
    assert killed > 0
    # Some sessions were killed while queued: the worker dropped them without a forward pass of their own.
    posts = (after["route_hits"].get("POST /v1/chat/completions", 0)
             - before.get("route_hits", {}).get("POST /v1/chat/completions", 0))
    forwards = after["forward_passes"] - before.get("forward_passes", 0)
    aborted = (after["counters"]["sglang:num_aborted_requests_total"]
               - before.get("counters", {}).get("sglang:num_aborted_requests_total", 0))
    assert forwards < posts, f"{forwards} forward passes for {posts} requests: no queued request was dropped"
    assert aborted >= posts - forwards
    print(f"\n[mono] {posts} requests, {forwards} forward passes ({posts - forwards} dropped while queued), "
          f"{aborted} aborts, {killed} sessions killed; recovery {checks['recovery']['measured']}")


@pytest.mark.long  # ~7 min on 2 loaded cores (converge ~5, verification ~2)
def test_converges_and_verifies_at_the_defaults(mono_cluster: ScratchCluster) -> None:
    report, before, after, seconds = _site_with_verify(mono_cluster, [])
    _assert_passed_and_queued_dropped(report, before, after)
    assert report["settings"]["cycles"] == 2 and report["settings"]["concurrency"] == 60
    print(f"[mono] site.yml with verification at the defaults: {seconds:.0f} s")


@pytest.mark.long
def test_verifies_with_ten_cascades_of_250(mono_cluster: ScratchCluster) -> None:
    report, before, after, seconds = _site_with_verify(mono_cluster, ["--cycles", "10", "--concurrency", "250"])
    _assert_passed_and_queued_dropped(report, before, after)
    assert report["settings"]["cycles"] == 10 and report["settings"]["concurrency"] == 250
    print(f"[mono] site.yml with 10 x 250 cascades: {seconds:.0f} s")
