"""Take a host's stale workers out of the router and wait until they are idle, before the units role stops them."""

from __future__ import annotations

from collections.abc import Iterable


def drain_stale(router_url: str, workers: Iterable[tuple[str, str]], keep_urls: Iterable[str],
                timeout_s: float, api_key: str | None = None) -> dict[str, object]:
    """Take each stale worker ``(url, role)`` out of the router and wait until it says idle (pdfleet.fleet's
    drain, the rollout's path), so that stopping it fails no request the router could send elsewhere.

    A URL the plan gives to a successor (an instance renamed on the same port) stays in the router: removing
    it would leave the router without it after the successor starts; stopping the old server then lets
    SGLang finish its in-flight requests (SIGTERM waits for them). A worker that does not answer serves
    nothing and is not waited for. One that is still busy after ``timeout_s`` is reported and stopped anyway
    (its unit's TimeoutStopSec bounds the rest).
    """
    from pdfleet import fleet
    from pdfleet.fleet.http import HTTPError, call

    router = fleet.RouterClient(router_url, api_key) if router_url else None
    keep = {u.rstrip("/") for u in keep_urls}
    report: list[dict[str, object]] = []
    for url, role in workers:
        url = url.rstrip("/")
        entry: dict[str, object] = {"url": url, "role": role, "removed_from_router": False, "idle": None,
                                    "note": ""}
        report.append(entry)
        if url in keep:
            entry["note"] = "the plan gives this URL to another unit: left in the router"
            continue
        if router is not None:
            try:
                entry["removed_from_router"] = router.remove(url, until_gone=False) is not None
            except fleet.RouterError as e:
                entry["note"] = f"not removed from the router ({e})"
        try:
            call("GET", url + "/health", timeout_s=5.0)
        except HTTPError:
            entry["note"] = (str(entry["note"]) + "; " if entry["note"] else "") + "not answering: serves nothing"
            continue
        idle = fleet.wait_idle([(url, "mono" if role not in ("prefill", "decode") else role)], timeout_s)
        entry.update(idle=idle.idle, waited_s=round(idle.waited_s, 1))
        if not idle.idle:
            entry["note"] = f"still busy after {timeout_s:g} s ({idle.describe()}); stopped anyway"
    if router is not None:  # smg lists a removed worker as draining for a few seconds: gone before its unit stops
        try:
            router.wait_gone([str(e["url"]) for e in report if e["removed_from_router"]])
        except fleet.RouterError as e:
            report[-1]["note"] = f"{report[-1]['note']}; {e}".lstrip("; ")
    return {"router": router_url, "workers": report, "summary": [_drain_line(e) for e in report],
            "changed": any(bool(e["removed_from_router"]) for e in report)}


def _drain_line(e: dict[str, object]) -> str:
    left = "left the router" if e["removed_from_router"] else "was not in the router"
    idle = f"; idle after {e['waited_s']} s" if e.get("idle") else ""
    note = f"; {e['note']}" if e["note"] else ""
    return f"{e['url']} ({e['role']}): {left}{idle}{note}"
