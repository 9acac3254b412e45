"""Checks 1, 2 and 4 of the protocol: the config gate, deep liveness and recovery.

Each returns a :class:`CheckResult` with what was measured, the threshold, and per-node detail. Nothing
here trusts ``/health`` alone: liveness and recovery are real generations through the router with a
deadline, and recovery also waits for the PD queues to drain.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from typing import Any

from pdfleet.verify import client
from pdfleet.verify.metrics import missing_gauges, parse_prometheus, queue_depths
from pdfleet.verify.result import ERROR, INCONCLUSIVE, CheckResult, status_from
from pdfleet.verify.settings import Settings
from pdfleet.verify.targets import Target, Worker

# Server args prefill and decode must agree on for KV transfer to be meaningful.
KV_AGREEMENT_KEYS = ("served_model_name", "page_size", "kv_cache_dtype", "disaggregation_transfer_backend",
                     "version")
ROLE_MODE = {"prefill": "prefill", "decode": "decode", "mono": "null"}


class Unreachable(Exception):
    """The router cannot be reached at all: the protocol cannot run (exit 2)."""


async def server_info(url: str, timeout_s: float) -> dict[str, Any]:
    """``/server_info``, falling back to the older ``/get_server_info``."""
    last = ""
    for path in ("/server_info", "/get_server_info"):
        resp = await client.request(url + path, timeout_s=timeout_s)
        if resp.status == 200:
            try:
                data = resp.json()
            except ValueError:
                data = None
            if isinstance(data, dict):
                return data
            last = f"{path} answered 200 without a JSON object"
            continue
        last = f"{path} answered {resp.status}"
    raise client.HTTPClientError(f"{url}: no server info ({last})")


def compare_worker(worker: Worker, info: dict[str, Any], target: Target) -> list[str]:
    """What in one worker's effective args differs from the plan."""
    out: list[str] = []
    want_mode = ROLE_MODE.get(worker.role)
    mode = str(info.get("disaggregation_mode", "null"))
    if want_mode and mode != want_mode:
        out.append(f"{worker.name}: disaggregation_mode is {mode!r}, planned {want_mode!r}")
    if worker.role in ("prefill", "decode"):
        backend = info.get("disaggregation_transfer_backend")
        if backend != "nixl":
            out.append(f"{worker.name}: disaggregation_transfer_backend is {backend!r}, planned 'nixl'")
    if worker.tp is not None and info.get("tp_size") != worker.tp:
        out.append(f"{worker.name}: tp_size is {info.get('tp_size')!r}, planned {worker.tp}")
    served = info.get("served_model_name") or info.get("model_path")
    if target.model and served != target.model:
        out.append(f"{worker.name}: serves model {served!r}, planned {target.model!r}")
    if target.sglang_version and str(info.get("version")) != target.sglang_version:
        out.append(f"{worker.name}: SGLang {info.get('version')!r}, planned {target.sglang_version!r}")
    return out


def kv_disagreements(infos: dict[str, dict[str, Any]], roles: dict[str, str]) -> list[str]:
    """Prefill and decode workers must agree on the KV settings (page size, model, dtype, …)."""
    pd = {name: info for name, info in infos.items() if roles.get(name) in ("prefill", "decode")}
    out: list[str] = []
    for key in KV_AGREEMENT_KEYS:
        values = {name: info.get(key) for name, info in pd.items()}
        if len({repr(v) for v in values.values()}) > 1:
            listed = ", ".join(f"{n}={v!r}" for n, v in sorted(values.items()))
            out.append(f"prefill and decode disagree on {key}: {listed}")
    return out


def router_worker_urls(data: Any) -> set[str]:
    """Worker URLs from the router's ``/workers`` (or ``/get_loads``, ``/list_workers``) answer."""
    urls: set[str] = set()
    items: list[Any] = []
    if isinstance(data, dict):
        for key in ("workers", "urls", "prefill", "decode"):
            value = data.get(key)
            if isinstance(value, list):
                items += value
    elif isinstance(data, list):
        items = data
    for item in items:
        if isinstance(item, str):
            urls.add(item.rstrip("/"))
        elif isinstance(item, dict):
            url = item.get("url") or item.get("worker")
            if isinstance(url, str):
                urls.add(url.rstrip("/"))
    return urls


def unplanned_router_workers(listed: set[str], target: Target) -> list[str]:
    """A worker the router routes to that the plan does not name: a pdfleet unit a converge failed to remove
    (or one started by hand). Checked only against an inventory's plan, not explicit --prefill/--decode URLs."""
    if not target.plan:
        return []
    extra = sorted(listed - {w.url for w in target.workers})
    return [f"router lists worker(s) the plan does not name: {', '.join(extra)}; `pdfleet plan --removals` shows "
            "which unit serves it, site.yml drains and removes pdfleet's"] if extra else []


async def _router_listing(router: str, timeout_s: float) -> tuple[str, set[str], int | None]:
    """(the listing's path, the URLs it lists, None), or ("", set(), the refusal status: 401/403 when the router
    wants an API key it was not sent or refused the one it was)."""
    refused = None
    for path in ("/workers", "/get_loads", "/list_workers"):
        try:
            resp = await client.request(router + path, timeout_s=timeout_s)
        except (client.HTTPClientError, TimeoutError):
            continue  # reported as "no worker listing" by the caller
        if resp.status == 200:
            try:
                return path, router_worker_urls(resp.json()), None
            except ValueError:
                continue
        if resp.status in (401, 403):
            refused = refused or resp.status
    return "", set(), refused


def refused_listing(router: str, status: int) -> str:
    """The config gate's failure for a router that refused its worker listing (its API key)."""
    return (f"router {router} refused its worker listing ({status}): it was started with an API key "
            "(router.api_key) and this run sent none or another. Fix: pass --api-key-file FILE (a 0600 file "
            "holding the key, or an env file with PDFLEET_ROUTER_API_KEY=) or set $PDFLEET_ROUTER_API_KEY; with "
            "-i the key is read from the inventory's pdfleet_units_secrets.PDFLEET_ROUTER_API_KEY (Vault)")


async def config_gate(target: Target, s: Settings) -> tuple[CheckResult, dict[str, dict[str, Any]]]:
    """Check 1. Returns the result and the workers' server info (for the report's versions)."""
    t0 = time.monotonic()
    try:
        ready = await client.request(target.router_url + "/readiness", timeout_s=s.http_timeout_s)
    except (client.HTTPClientError, TimeoutError) as e:
        raise Unreachable(f"router {target.router_url} is unreachable: {e}") from e
    failures: list[str] = []
    detail: dict[str, Any] = {"router": {"readiness": ready.status}}
    if ready.status != 200:
        failures.append(f"router /readiness is {ready.status} (needs 200: healthy prefill and decode)")
    infos: dict[str, dict[str, Any]] = {}
    for w in target.workers:
        try:
            info = await server_info(w.url, s.http_timeout_s)
        except (client.HTTPClientError, TimeoutError) as e:
            failures.append(f"{w.name}: server info unavailable at {w.url}: {e}")
            detail[w.name] = {"url": w.url, "reachable": False}
            continue
        infos[w.name] = info
        problems = compare_worker(w, info, target)
        failures += problems
        detail[w.name] = {"url": w.url, "reachable": True, "mode": info.get("disaggregation_mode"),
                          "backend": info.get("disaggregation_transfer_backend"), "tp": info.get("tp_size"),
                          "model": info.get("served_model_name"), "version": info.get("version"),
                          "page_size": info.get("page_size"), "problems": problems}
    failures += kv_disagreements(infos, {w.name: w.role for w in target.workers})
    source, listed, refused = await _router_listing(target.router_url, s.http_timeout_s)
    missing = sorted(w.url for w in target.workers if w.url not in listed)
    detail["router"].update({"listing": source or None, "workers": sorted(listed)})
    if refused:
        failures.append(refused_listing(target.router_url, refused))
    elif not source:
        failures.append("router exposes no worker listing (/workers, /get_loads, /list_workers)")
    elif missing:
        failures.append(f"router does not list planned worker(s): {', '.join(missing)}")
    failures += unplanned_router_workers(listed, target)
    measured = {"readiness_status": ready.status, "workers_reachable": len(infos),
                "workers_planned": len(target.workers), "router_lists": len(listed & {w.url for w in target.workers})}
    thresholds = {"readiness_status": 200, "workers_reachable": len(target.workers),
                  "router_lists": len(target.workers), "transfer_backend": "nixl",
                  "model": target.model, "sglang_version": target.sglang_version}
    summary = "every worker matches the plan and is routed" if not failures else f"{len(failures)} mismatch(es)"
    return CheckResult("config", status_from(failures), summary, measured, thresholds, failures, detail,
                       time.monotonic() - t0), infos


def nonce_prompt(prompt: str) -> str:
    return f"{prompt} [{uuid.uuid4().hex[:12]}]"


async def fresh_request(router: str, model: str, prompt: str, max_tokens: int,
                        deadline_s: float) -> dict[str, Any]:
    """One real chat completion through the router: status, id, model, tokens, latency, problem."""
    t0 = time.monotonic()
    out: dict[str, Any] = {"status": 0, "id": None, "model": None, "completion_tokens": None, "latency_s": None}
    try:
        resp = await client.request(router + "/v1/chat/completions", "POST",
                                    client.chat_body(model, nonce_prompt(prompt), max_tokens, False),
                                    timeout_s=deadline_s)
    except TimeoutError:
        out["latency_s"] = round(time.monotonic() - t0, 3)
        out["problem"] = f"no answer within the {deadline_s:g} s deadline"
        return out
    except client.HTTPClientError as e:
        out["problem"] = str(e)
        return out
    out["status"], out["latency_s"] = resp.status, round(resp.elapsed_s, 3)
    try:
        body = resp.json()
    except ValueError:
        body = None
    if resp.status != 200 or not isinstance(body, dict):
        out["problem"] = f"HTTP {resp.status}: {resp.text[:200]}"
        return out
    usage = body.get("usage") or {}
    out.update(id=body.get("id"), model=body.get("model"), completion_tokens=usage.get("completion_tokens"))
    if not out["id"]:
        out["problem"] = "the answer has no completion id"
    elif out["model"] != model:
        out["problem"] = f"the answer names model {out['model']!r}, expected {model!r}"
    elif not isinstance(out["completion_tokens"], int) or out["completion_tokens"] < 1:
        out["problem"] = f"usage.completion_tokens is {out['completion_tokens']!r}"
    return out


async def deep_liveness(target: Target, model: str, s: Settings) -> CheckResult:
    """Check 2: a fresh real request through the router completes within the deadline."""
    t0 = time.monotonic()
    r = await fresh_request(target.router_url, model, s.liveness_prompt, s.liveness_max_tokens,
                            s.liveness_deadline_s)
    failures = [f"fresh request: {r['problem']}"] if "problem" in r else []
    summary = (f"HTTP {r['status']} {r['id']} {r['completion_tokens']} tokens in {r['latency_s']} s"
               if not failures else failures[0])
    return CheckResult("liveness", status_from(failures), summary, r,
                       {"status": 200, "deadline_s": s.liveness_deadline_s, "model": model}, failures,
                       {"router": r}, time.monotonic() - t0)


async def _health(url: str, s: Settings) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        resp = await client.request(url + "/health", timeout_s=max(s.http_timeout_s, s.health_max_s))
        return {"status": resp.status, "latency_s": round(time.monotonic() - t0, 4)}
    except (client.HTTPClientError, TimeoutError) as e:
        return {"status": 0, "latency_s": round(time.monotonic() - t0, 4), "error": str(e)}


async def fetch_metrics(url: str, timeout_s: float) -> dict[str, float] | None:
    try:
        resp = await client.request(url + "/metrics", timeout_s=timeout_s)
    except (client.HTTPClientError, TimeoutError):
        return None
    return parse_prometheus(resp.text) if resp.status == 200 else None


async def wait_idle(target: Target, s: Settings, deadline_s: float | None = None,
                    interval_s: float = 0.5) -> dict[str, Any]:
    """Poll every worker's PD queue gauges until all are zero or the deadline (default idle_deadline_s)
    passes."""
    deadline = s.idle_deadline_s if deadline_s is None else deadline_s
    t0 = time.monotonic()
    depths: dict[str, dict[str, float]] = {}
    missing: dict[str, list[str]] = {}
    while True:
        # every worker read at once: one round of reads costs the slowest worker, not their sum
        metrics = await asyncio.gather(*(fetch_metrics(w.url, s.http_timeout_s) for w in target.workers))
        for w, m in zip(target.workers, metrics, strict=True):
            depths[w.name] = queue_depths(m) if m is not None else {"unreachable": 1.0}
            lacking = missing_gauges(m, w.role) if m is not None else []
            if lacking:
                missing[w.name] = lacking
            else:
                missing.pop(w.name, None)
        busy = {n: {k: v for k, v in d.items() if v} for n, d in depths.items()}
        busy = {n: d for n, d in busy.items() if d}
        elapsed = time.monotonic() - t0
        if not busy or elapsed >= deadline:
            return {"idle": not busy, "seconds": round(elapsed, 2), "busy": busy, "depths": depths,
                    "missing": missing}
        await asyncio.sleep(min(interval_s, max(0.0, deadline - elapsed)))


async def wait_quiet(target: Target, s: Settings, limit_s: float, interval_s: float = 0.25) -> float:
    """The cascade's pause and settle: up to ``limit_s`` until every worker's queues read empty twice in a row
    (the kills' aborts have landed; one read can fall between two requests). A worker that does not export its
    queue gauges (idle unprovable) or is unreachable gets the whole time. Returns the seconds waited."""
    t0 = time.monotonic()
    streak = 0
    while time.monotonic() - t0 < limit_s:
        idle = await wait_idle(target, s, deadline_s=0)  # one read of every worker
        streak = streak + 1 if idle["idle"] and not idle["missing"] else 0
        if streak >= 2:
            break
        await asyncio.sleep(min(interval_s, max(0.0, limit_s - (time.monotonic() - t0))))
    return time.monotonic() - t0


async def sustained_probe(target: Target, model: str, s: Settings) -> dict[str, Any]:
    deadline = s.probe_deadline_s
    results = await asyncio.gather(*(fresh_request(target.router_url, model, s.liveness_prompt,
                                                   s.probe_max_tokens, deadline)
                                     for _ in range(s.probe_concurrency)))
    ok = [r for r in results if "problem" not in r]
    lat = [r["latency_s"] for r in ok]
    problems = sorted({r["problem"] for r in results if "problem" in r})
    return {"sent": len(results), "completed": len(ok), "p50_s": round(statistics.median(lat), 3) if lat else None,
            "max_s": max(lat) if lat else None, "problems": problems[:5]}


async def recovery(target: Target, model: str, s: Settings) -> CheckResult:
    """Check 4: fast /health everywhere, a fresh request, a sustained probe, and idle PD queues.

    The /health reads come first, all at once (each timed alone). The fresh request and the sustained probe then
    run together: each is its own evidence (one request served; every one of probe_concurrency served), and one
    wall of the two instead of their sum keeps the protocol close to its kill windows. The queues are read last."""
    t0 = time.monotonic()
    failures: list[str] = []
    names = ["router", *(w.name for w in target.workers)]
    reads = await asyncio.gather(*(_health(url, s) for url in [target.router_url, *(w.url for w in target.workers)]))
    health = dict(zip(names, reads, strict=True))
    for name, h in health.items():
        if h["status"] != 200 or h["latency_s"] > s.health_max_s:
            failures.append(f"{name} /health: HTTP {h['status']} in {h['latency_s']} s (needs 200 within "
                            f"{s.health_max_s} s)")
    fresh, probe = await asyncio.gather(
        fresh_request(target.router_url, model, s.liveness_prompt, s.liveness_max_tokens, s.recovery_deadline_s),
        sustained_probe(target, model, s))
    if "problem" in fresh:
        failures.append(f"fresh request after the cascades: {fresh['problem']}")
    if probe["completed"] < probe["sent"]:
        failures.append(f"sustained probe: {probe['completed']}/{probe['sent']} completed within "
                        f"{s.probe_deadline_s:g} s ({'; '.join(probe['problems'])})")
    idle = await wait_idle(target, s)
    if not idle["idle"]:
        failures.append(f"PD queues not idle after {s.idle_deadline_s:g} s: {idle['busy']}")
    measured = {"health_max_latency_s": max(h["latency_s"] for h in health.values()),
                "health_all_200": all(h["status"] == 200 for h in health.values()),
                "fresh_status": fresh["status"], "fresh_latency_s": fresh["latency_s"],
                "probe_completed": probe["completed"], "probe_sent": probe["sent"], "probe_max_s": probe["max_s"],
                "queues_idle": idle["idle"], "queues_idle_after_s": idle["seconds"],
                "queue_gauges_missing": idle["missing"]}
    thresholds = {"health_max_s": s.health_max_s, "fresh_deadline_s": s.recovery_deadline_s,
                  "probe_concurrency": s.probe_concurrency, "probe_deadline_s": s.probe_deadline_s,
                  "idle_deadline_s": s.idle_deadline_s}
    summary = ("served again: fresh request, sustained probe and idle queues" if not failures
               else f"{len(failures)} problem(s) after the cascades")
    status = status_from(failures)
    if idle["missing"]:  # idle cannot be proven for a queue that is not exported: say so, never drop it
        gaps = "; ".join(f"{n}: {', '.join(g)}" for n, g in sorted(idle["missing"].items()))
        failures.append(f"PD queue gauge(s) not exported, so their idleness is unproven: {gaps}")
        if status != "fail":
            status, summary = INCONCLUSIVE, f"served again, but queue gauges are missing ({gaps})"
    detail = {"health": health, "fresh": fresh, "probe": probe, "queues": idle["depths"],
              "queues_missing": idle["missing"]}
    return CheckResult("recovery", status, summary, measured, thresholds, failures, detail,
                       time.monotonic() - t0)


def could_not_run(name: str, why: str) -> CheckResult:
    return CheckResult(name, ERROR, why, failures=[why])
