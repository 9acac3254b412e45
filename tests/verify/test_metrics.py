from __future__ import annotations

from pdfleet.verify.metrics import counter_deltas, parse_prometheus, queue_depths

TEXT = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m",engine_type="decode",tp_rank="0"} 2.0
sglang:num_running_reqs{model_name="m",engine_type="decode",tp_rank="1"} 1.0
sglang:num_decode_transfer_queue_reqs{model_name="m"} 0.0
sglang:num_aborted_requests{model_name="m"} 7
sglang:num_transfer_failed_reqs_total{model_name="m"} NaN
garbage line
"""


def test_parse_sums_label_sets_and_skips_nan() -> None:
    m = parse_prometheus(TEXT)
    assert m["sglang:num_running_reqs"] == 3.0
    assert "sglang:num_transfer_failed_reqs_total" not in m


def test_queue_depths_only_present_gauges() -> None:
    assert queue_depths(parse_prometheus(TEXT)) == {"sglang:num_decode_transfer_queue_reqs": 0.0,
                                                    "sglang:num_running_reqs": 3.0}


def test_counter_deltas_total_suffix_and_reset() -> None:
    before = {"sglang:num_aborted_requests": 7.0, "sglang:num_bootstrap_failed_reqs_total": 10.0}
    after = {"sglang:num_aborted_requests_total": 12.0, "sglang:num_bootstrap_failed_reqs_total": 3.0}
    d = counter_deltas(before, after)
    assert d["sglang:num_aborted_requests_total"] == 5.0
    assert d["sglang:num_bootstrap_failed_reqs_total"] == 3.0  # restarted worker: counts from zero
    assert "sglang:num_transfer_failed_reqs_total" not in d


def test_missing_gauges_are_named_per_role() -> None:
    from pdfleet.verify.metrics import missing_gauges

    prefill = {"sglang:num_prefill_bootstrap_queue_reqs": 0.0, "sglang:num_running_reqs": 0.0,
               "sglang:num_queue_reqs": 0.0}
    assert missing_gauges(prefill, "prefill") == ["sglang:num_prefill_inflight_queue_reqs"]
    assert missing_gauges(prefill, "mono") == []
    assert "sglang:num_decode_transfer_queue_reqs" in missing_gauges(prefill, "decode")
