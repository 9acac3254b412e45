"""Property: no random or truncated multipart message kills a PATCHED bootstrap thread.

Runs inside the heavy runtime python (it needs SGLang and Hypothesis there):
``python fuzz_bootstrap.py VERSION CONN_FILE [MAX_EXAMPLES]``; exit 0 when the property held.
For each example a fresh real prefill manager gets the messages, then a valid transfer info for a
probe room, which must still reach WaitingForInput with the thread alive.
"""

from __future__ import annotations

import logging
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pdfleet.patch import nixlcpu as nc

PROBE_ROOM = 987_654_321  # no generated message names it


def _valid_messages(version: str) -> list[list[bytes]]:
    return [
        nc.register_kv_args_frames(version),
        nc.transfer_info_frames(version, 7, kv_indices=[1, 2]),
        nc.transfer_info_frames(version, 8),
        nc.abort_frames(version, 7),
    ]


def messages(version: str) -> st.SearchStrategy[list[bytes]]:
    frame = st.binary(max_size=24)
    tag = st.sampled_from([nc.GUARD, b"ABORT", b"WATERMARK", b"STAGING_RSP", b"None", b"7", b""])
    truncated = st.tuples(st.sampled_from(_valid_messages(version)), st.integers(0, 30)).map(
        lambda mt: mt[0][: mt[1]] or [b""]
    )
    garbled = st.tuples(st.sampled_from(_valid_messages(version)), st.integers(0, 24), frame).map(
        lambda m: [*m[0][: m[1]], m[2], *m[0][m[1] + 1:]]
    )
    tagged = st.tuples(tag, st.lists(frame, max_size=12)).map(lambda t: [t[0], *t[1]])
    raw = st.lists(frame, min_size=1, max_size=12)
    return st.one_of(truncated, garbled, tagged, raw)


def main() -> int:
    version, conn_file = sys.argv[1], sys.argv[2]
    max_examples = int(sys.argv[3]) if len(sys.argv) > 3 else 60
    conn = nc.load_conn_module(conn_file)
    logging.getLogger(conn.__name__).setLevel(logging.CRITICAL)  # dropped messages log by design

    @settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(messages(version), min_size=1, max_size=8))
    def thread_survives(batch: list[list[bytes]]) -> None:
        with nc.CpuPrefill.start(conn) as prefill, nc.DecodePusher(prefill.endpoint) as decode:
            for msg in batch:
                decode.send(msg)
            prefill.open_room(PROBE_ROOM)
            decode.send(nc.transfer_info_frames(version, PROBE_ROOM))
            served = prefill.wait_for_status(PROBE_ROOM, "WaitingForInput", timeout=10.0)
            assert prefill.bootstrap_alive(), f"bootstrap thread died on {batch!r}"
            assert served, f"probe room is {prefill.status_name(PROBE_ROOM)} after {batch!r}"

    thread_survives()
    print(f"property held for {max_examples} examples on {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
