"""The rollout's regression benchmark: pdfleet.verify's own load and comparison (``bench.pdfleet_load``,
``bench.bench_check``, the protocol's tolerances) through the production router, once before the first host
(saved as this run's baseline when it completed) and once after the last. Run alone, without the protocol's
recovery check, whose idle-queue condition never holds while clients are being served."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pdfleet.verify import bench
from pdfleet.verify.settings import Settings

PROFILE = "rollout"


def run(router_url: str, model: str, baseline_file: Path, save: bool, **overrides: Any) -> dict[str, Any]:
    """One benchmark; the check as a dict (status pass | fail | no-baseline | error, measured, thresholds)."""
    s = replace(Settings(bench_requests=32), baseline_file=baseline_file, save_baseline=save, **overrides)
    t0 = time.monotonic()
    result, error = None, None
    try:
        result = asyncio.run(bench.pdfleet_load(router_url.rstrip("/") + "/v1/chat/completions", model, s))
    except (RuntimeError, ValueError, OSError) as e:
        error = str(e)
    check = bench.bench_check(result, error, PROFILE, s, {"router": router_url}, time.monotonic() - t0)
    out = check.to_dict()
    if save:  # the benchmark alone is this step's verdict: stored unless it could not run or lost requests
        out["stored"] = bench.store_if_passed("pass", check, s)
    return out
