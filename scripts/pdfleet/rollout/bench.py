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

from pdfleet.verify import bench, client
from pdfleet.verify.result import FAIL, CheckResult
from pdfleet.verify.settings import Settings

PROFILE = "rollout"


def _once(router_url: str, model: str, s: Settings) -> CheckResult:
    t0 = time.monotonic()
    result, error = None, None
    try:
        result = asyncio.run(bench.pdfleet_load(router_url.rstrip("/") + "/v1/chat/completions", model, s))
    except (RuntimeError, ValueError, OSError) as e:
        error = str(e)
    return bench.bench_check(result, error, PROFILE, s, {"router": router_url}, time.monotonic() - t0)


def _regression(check: CheckResult) -> bool:
    """A failed comparison with the baseline (not an error, not lost requests)."""
    return check.status == FAIL and check.thresholds.get("baseline") is not None


def run(router_url: str, model: str, baseline_file: Path, save: bool, confirm: bool = True,
        api_key: str | None = None, **overrides: Any) -> dict[str, Any]:
    """One benchmark; the check as a dict (status pass | fail | no-baseline | error, measured, thresholds).

    With ``confirm``, a regression against the baseline is measured once more and only a second regression
    counts (``first_attempt`` keeps the first): the rollout runs under live client traffic, where one 32-request
    median moves by more than the protocol's tolerances on a busy control machine (seen on the sim fleet: TTFT
    +28 % with nothing changed but the patch); a real regression is there in both runs. Lost requests and
    errors are never measured again."""
    s = replace(Settings(bench_requests=32), baseline_file=baseline_file, save_baseline=save, **overrides)
    if api_key:  # the router's key (router.api_key), sent to its address only
        client.set_bearer(router_url, api_key)
    check = _once(router_url, model, s)
    first = None
    if confirm and not save and _regression(check):
        first = check
        check = _once(router_url, model, s)
    out = check.to_dict()
    if first is not None:
        out["first_attempt"] = {"status": first.status, "summary": first.summary, "failures": first.failures}
    if save:  # the benchmark alone is this step's verdict: stored unless it could not run or lost requests
        out["stored"] = bench.store_if_passed("pass", check, s)
    return out
