"""The incident, end to end on SGLang's real NIXL code: an abort cascade through the real router.

60 streaming sessions go through the router to a simulated prefill (running the real
``NixlKVManager`` bootstrap thread and transfer worker of the given conn.py) and a simulated decode
(pushing the real version's frames). The client is killed mid-stream, so the router drops every
session at once and the decode pushes ``ABORT`` for each request whose transfer was still pending.

Expected, from the SGLang version matrix: with the pristine 0.5.15.post1 conn.py the prefill's
reader thread dies (logged), ``/health`` stays 200 and a new request does not complete within its
deadline; with the patched one (and with 0.5.23, whose NIXL handles ABORT) new requests complete and
the PD queues drain back to zero.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pdfleet_sim.paths import import_path
from pdfleet_sim.testing.localpd import HOST, LocalPD, RouterSpec, http_get, http_json
from pdfleet_sim.testing.realwedge import runtime_pd_env
from pdfleet_sim.testing.simclient import chat_body

from .helpers import stage_counts, wait_until

pytestmark = [pytest.mark.sglang, pytest.mark.slow]

SESSIONS = 60
KILL_AFTER_FIRST_TOKENS = 20
PROBE_DEADLINE_S = 10.0
DEATH_SIGNATURES = ("First message should be", "Foreign traffic", "bootstrap_thread died")
# Whether the prefill's reader thread survives the cascade, by (version, flavour).
SURVIVES = {("0.5.15.post1", "pristine"): False, ("0.5.15.post1", "patched"): True,
            ("0.5.23", "pristine"): True, ("0.5.23", "patched"): True}


def _runtime(version: str):
    from pdfleet.patch.runtime import ensure_runtime

    return ensure_runtime([version])  # built once and cached; never skipped


def _kill_mid_stream(pd: LocalPD, log: Path) -> int:
    """Run the 60-session client until enough sessions stream, then SIGKILL it; return first tokens seen."""
    env = {**os.environ, "PYTHONPATH": import_path()}
    # ~4k-token prompts: 0.2 s of simulated prefill each, so the prefill queue backs up behind the sessions.
    url = pd.router_url + "/v1/chat/completions"
    cmd = [sys.executable, "-m", "pdfleet_sim.testing.simclient", "sessions", "--url", url,
           "-n", str(SESSIONS), "--model", pd.model, "--prompt", "x" * 4000, "--prompt-repeat", "4",
           "--max-tokens", "2000"]
    first = 0
    with log.open("w") as out:
        client = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=out, text=True, env=env, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            assert client.stdout is not None
            for line in client.stdout:
                out.write(line)
                first += line.startswith("first-token")
                if first >= KILL_AFTER_FIRST_TOKENS or time.monotonic() > deadline:
                    break
        finally:
            client.kill()
            client.wait()
    return first


@pytest.mark.parametrize(("version", "flavour"), list(SURVIVES))
def test_abort_cascade_through_router(version: str, flavour: str, router: RouterSpec, tmp_path: Path) -> None:
    rt = _runtime(version)
    env = runtime_pd_env(rt, flavour == "patched", version)
    with LocalPD([str(rt.python)], tmp_path, env, router) as pd:
        status, res = http_json(pd.router_url + "/v1/chat/completions",
                                chat_body(pd.model, "In one sentence, what is PCIe?", 40, False))
        assert status == 200, res

        first = _kill_mid_stream(pd, tmp_path / "client.log")
        assert first >= KILL_AFTER_FIRST_TOKENS, "the sessions never streamed"
        decode_log = lambda: pd.log_text("decode")  # noqa: E731
        # The decode saw the disconnects and pushed ABORT for the pending transfers.
        wait_until(lambda: decode_log().count("Aborted by AbortReq.") >= 1, 15, "decode-side aborts")
        wait_until(lambda: not stage_counts(pd.decode_url), 15, "the decode queues to empty")
        aborted_pending = len(re.findall(r"Decode (?:transfer|handshake) failed .*Aborted by AbortReq\.", decode_log()))
        assert aborted_pending >= 1, "no request was aborted with a pending transfer: the cascade missed its target"

        assert http_get(pd.router_url + "/health")[0] == 200
        t = time.monotonic()
        assert http_get(pd.prefill_url + "/health")[0] == 200
        assert time.monotonic() - t < 0.3, "/health must answer at once, wedged or not"

        t = time.monotonic()
        try:
            status, res = http_json(pd.router_url + "/v1/chat/completions",
                                    chat_body(pd.model, "In one sentence, what is PCIe?", 40, False),
                                    timeout=PROBE_DEADLINE_S)
        except OSError:
            status = 0
        probe_s = time.monotonic() - t
        prefill_log = pd.log_text("prefill")
        threads = http_json(pd.prefill_url + "/pdfleet/sim")[1]["kv_threads"]
        # The prefill runs TP4: one real bootstrap thread per rank, each on its own socket.
        readers = [alive for name, alive in threads.items() if name.startswith("bootstrap_thread@tp")]
        assert len(readers) == 4, threads
        route = f"http://{HOST}:{pd.bootstrap_port}/route?prefill_dp_rank=0&prefill_cp_rank=0&target_pp_rank=0"
        assert len({http_json(f"{route}&target_tp_rank={r}")[1]["rank_port"] for r in range(4)}) == 4
        report = (f"{version} {flavour}: {first} first tokens before the kill, {aborted_pending} aborted with a "
                  f"pending transfer, probe status {status} in {probe_s:.2f}s, threads {threads}")
        print(report)
        if SURVIVES[(version, flavour)]:
            assert status == 200, report
            assert res["id"].startswith("chatcmpl-") and res["model"] == pd.model
            assert all(readers), report
            assert not any(sig in prefill_log for sig in DEATH_SIGNATURES), report
            assert "Exception in thread" not in prefill_log
            wait_until(lambda: not stage_counts(pd.prefill_url), 10, "the prefill queues to drain")
        else:
            assert status != 200, f"the wedge did not happen: {report}"
            assert not any(readers), report  # the decode's ABORT reached every rank
            assert "First message should be" in prefill_log and "Exception in thread" in prefill_log
            assert stage_counts(pd.prefill_url).get("bootstrap", 0) >= 1, "the probe should sit in Bootstrapping"
            assert http_get(pd.prefill_url + "/health")[0] == 200
