"""Check 6: a fixed load, compared with the stored baseline of the profile.

The load comes from pdfleet's own generator (``requests`` streaming chat completions, ``concurrency`` at a
time, fixed prompt and output lengths; ``ignore_eos`` so every request produces the same number of tokens
where the server honours it) or, on a real cluster, from ``python -m sglang.bench_serving --dataset-name
random-ids`` (``--bench-tool sglang``). Output throughput, median TTFT and median TPOT are compared with the
baseline under tolerances. No stored baseline -> status ``no-baseline``: reported, never a failure.
Baselines live in one JSON file (``--baseline-file``, default ``$PDFLEET_BASELINE_FILE`` or
``reports/baselines.json``) keyed by :func:`baseline_key` (profile, SGLang version, plan fingerprint) and
carry the load they were measured with; a baseline of a different load is not compared. The first run on
a cluster whose whole verdict passes stores its benchmark as the baseline (:func:`store_if_passed`, called
once the verdict is known); a run that failed anything, a regressed benchmark included, never does.
``--save-baseline`` replaces an existing baseline, again only with a passing run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shlex
import statistics
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

from pdfleet.verify.cascade import long_prompt
from pdfleet.verify.client import StreamSession, chat_body
from pdfleet.verify.result import ERROR, FAIL, NO_BASELINE, PASS, CheckResult
from pdfleet.verify.settings import Settings

METRICS = ("output_throughput", "median_ttft_ms", "median_tpot_ms")
# Each completed request's TTFT, TPOT and end-to-end time (pdfleet's own load only), kept in the bench check's
# ``detail`` (not ``measured``, which failure messages print whole): the report page's latency distribution.
SAMPLES = "latency_samples"


def load_shape(s: Settings) -> dict[str, Any]:
    return {"tool": s.bench_tool, "requests": s.bench_requests, "concurrency": s.bench_concurrency,
            "prompt_words": s.bench_prompt_words, "max_tokens": s.bench_max_tokens}


async def pdfleet_load(url: str, model: str, s: Settings) -> dict[str, Any]:
    """Run the fixed load; return throughput, TTFT/TPOT medians (bench_serving's field names)."""
    sem = asyncio.Semaphore(s.bench_concurrency)
    tag = uuid.uuid4().hex[:8]
    sessions: list[StreamSession] = []

    async def one(i: int) -> None:
        body = chat_body(model, long_prompt(s.bench_prompt_words, f"bench-{tag}-{i}"), s.bench_max_tokens, True)
        body["ignore_eos"] = True
        sess = StreamSession(i, url, body)
        sessions.append(sess)
        async with sem:
            await sess.run()

    t0 = time.monotonic()
    try:
        await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(s.bench_requests))), s.bench_deadline_s)
    except TimeoutError:
        for sess in sessions:
            sess.kill()
    duration = time.monotonic() - t0
    done = [x for x in sessions if x.phase == "completed" and not x.killed]
    tokens = sum((x.usage or {}).get("completion_tokens", x.tokens) for x in done)
    ttft = [x.first_token_s * 1000 for x in done if x.first_token_s is not None]
    tpot = [t * 1000 for x in done if (t := x.tpot_s) is not None]
    return {"completed": len(done), "requests": s.bench_requests, "duration_s": round(duration, 3),
            "output_throughput": round(tokens / duration, 3) if duration > 0 else 0.0,
            "request_throughput": round(len(done) / duration, 3) if duration > 0 else 0.0,
            "median_ttft_ms": round(statistics.median(ttft), 3) if ttft else None,
            "median_tpot_ms": round(statistics.median(tpot), 3) if tpot else None,
            "errors": sorted({x.error for x in sessions if x.error})[:5],
            SAMPLES: {"ttft_ms": sorted(round(v, 3) for v in ttft), "tpot_ms": sorted(round(v, 3) for v in tpot),
                      "e2e_s": sorted(round(x.end_s, 3) for x in done if x.end_s is not None)}}


def sglang_command(base_url: str, s: Settings, output: Path) -> list[str]:
    """``python -m sglang.bench_serving`` with the same load shape (random-ids needs no download)."""
    prompt_tokens = int(s.bench_prompt_words * 1.3)
    return [*shlex.split(s.bench_python), "-m", "sglang.bench_serving", "--backend", "sglang",
            "--base-url", base_url, "--dataset-name", "random-ids", "--tokenizer", s.bench_tokenizer,
            "--random-input-len", str(prompt_tokens), "--random-output-len", str(s.bench_max_tokens),
            "--random-range-ratio", "1.0", "--num-prompts", str(s.bench_requests),
            "--max-concurrency", str(s.bench_concurrency), "--seed", str(s.seed), "--output-file", str(output)]


def parse_bench_serving(text: str) -> dict[str, Any]:
    """The last JSON line of a bench_serving output file."""
    lines = [line for line in text.splitlines() if line.strip().startswith("{")]
    if not lines:
        raise ValueError("bench_serving wrote no JSON result line")
    data = json.loads(lines[-1])
    return {"completed": data.get("completed"), "requests": data.get("num_prompts") or data.get("completed"),
            "duration_s": data.get("duration"), "output_throughput": data.get("output_throughput"),
            "request_throughput": data.get("request_throughput"), "median_ttft_ms": data.get("median_ttft_ms"),
            "median_tpot_ms": data.get("median_tpot_ms"), "errors": []}


def sglang_load(base_url: str, s: Settings, workdir: Path) -> dict[str, Any]:
    out = workdir / f"bench-serving-{uuid.uuid4().hex[:8]}.jsonl"
    proc = subprocess.run(sglang_command(base_url, s, out), capture_output=True, text=True,
                          timeout=s.bench_deadline_s, check=False)
    if proc.returncode != 0 or not out.is_file():
        raise RuntimeError(f"bench_serving exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return parse_bench_serving(out.read_text())


def baseline_key(target: dict[str, Any]) -> str:
    """``<profile> sglang=<version> plan=<fingerprint>`` of a report's target (its ``summary()``).

    The fingerprint hashes the plan (GPU split, ports, flags) when the target came from an inventory, else the
    workers' names, roles and tp and the model: never URLs with ephemeral ports.
    """
    plan = target.get("plan")
    # The plan document without where this checkout lives (paths): the same cluster from another clone or CI
    # workspace keeps its baseline.
    basis: Any = {k: v for k, v in plan.items() if k not in ("paths", "contexts")} if plan else {
        "workers": [{k: w.get(k) for k in ("name", "role", "tp", "host")} for w in target.get("workers", [])],
        "model": target.get("model")}
    digest = hashlib.sha256(json.dumps(basis, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{target.get('profile')} sglang={target.get('sglang_version')} plan={digest}"


def read_baselines(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise ValueError(f"baseline file {path} is not JSON ({e}); fix or remove it") from e
    return data if isinstance(data, dict) else {}


def save_baseline(path: Path, profile: str, shape: dict[str, Any], result: dict[str, Any],
                  versions: dict[str, Any]) -> None:
    data = read_baselines(path)
    data[profile] = {"load": shape, "result": {k: result.get(k) for k in METRICS}, "versions": versions,
                     "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def compare(result: dict[str, Any], baseline: dict[str, Any], s: Settings) -> tuple[list[str], dict[str, Any]]:
    """Failures and thresholds: throughput may drop by tol_throughput, TTFT/TPOT grow by tol_ttft/tol_tpot."""
    base = baseline["result"]
    limits = {"output_throughput_min": base["output_throughput"] * (1 - s.tol_throughput),
              "median_ttft_ms_max": base["median_ttft_ms"] * (1 + s.tol_ttft),
              "median_tpot_ms_max": base["median_tpot_ms"] * (1 + s.tol_tpot)}
    limits = {k: round(v, 3) for k, v in limits.items()}
    failures = []
    if result["output_throughput"] < limits["output_throughput_min"]:
        failures.append(f"output throughput {result['output_throughput']} tok/s < {limits['output_throughput_min']}"
                        f" (baseline {base['output_throughput']}, -{s.tol_throughput:.0%})")
    for key, tol in (("median_ttft_ms", s.tol_ttft), ("median_tpot_ms", s.tol_tpot)):
        value, limit = result.get(key), limits[f"{key}_max"]
        if value is None or value > limit:
            failures.append(f"{key} {value} > {limit} (baseline {base[key]}, +{tol:.0%})")
    return failures, limits


def bench_check(result: dict[str, Any] | None, error: str | None, profile: str, s: Settings,
                versions: dict[str, Any], duration_s: float, key: str | None = None) -> CheckResult:
    """Compare with the stored baseline of ``key`` (default: the profile); saving waits for the verdict."""
    shape = load_shape(s)
    key = key or profile
    if result is None:
        return CheckResult("bench", ERROR, f"benchmark could not run: {error}", {"load": shape},
                           failures=[f"benchmark could not run: {error}"], duration_s=duration_s)
    samples = {SAMPLES: result[SAMPLES]} if SAMPLES in result else {}
    measured = {**{k: v for k, v in result.items() if k != SAMPLES}, "load": shape}
    if result["completed"] < result["requests"]:
        why = f"only {result['completed']}/{result['requests']} benchmark requests completed: {result['errors']}"
        return CheckResult("bench", FAIL, why, measured, {"completed": result["requests"]}, [why],
                           duration_s=duration_s, detail=samples)
    measured["baseline_key"] = key
    baseline = read_baselines(s.baseline_file).get(key)
    if baseline is None or baseline.get("load") != shape:
        why = "no baseline" if baseline is None else "no baseline for this load shape"
        return CheckResult("bench", NO_BASELINE, f"{why} for {key} in {s.baseline_file} (not a failure; "
                           "this run becomes the baseline if its verdict passes)", measured,
                           {"baseline": None}, duration_s=duration_s, detail={"versions": versions, **samples})
    failures, limits = compare(result, baseline, s)
    summary = (f"{result['output_throughput']} tok/s, TTFT {result['median_ttft_ms']} ms, "
               f"TPOT {result['median_tpot_ms']} ms vs baseline {baseline['result']}")
    return CheckResult("bench", FAIL if failures else PASS, summary, measured,
                       {**limits, "baseline": baseline["result"], "baseline_saved_at": baseline.get("saved_at")},
                       failures, duration_s=duration_s, detail={"versions": versions, **samples})


def store_if_passed(verdict: str, bench: CheckResult | None, s: Settings) -> str | None:
    """After the verdict: store this run's benchmark as the baseline when the whole run passed and either
    no baseline exists for its key or ``--save-baseline`` asks to replace it. Returns a note, or None."""
    if verdict != "pass" or bench is None or bench.status not in (NO_BASELINE, PASS):
        return None
    if bench.status == PASS and not s.save_baseline:
        return None
    key = str(bench.measured.get("baseline_key"))
    shape = bench.measured.get("load") or load_shape(s)
    save_baseline(s.baseline_file, key, shape, bench.measured, bench.detail.get("versions", {}))
    return f"benchmark stored as the baseline {key!r} in {s.baseline_file}"
