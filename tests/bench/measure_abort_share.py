"""Measure the abort evidence at the production log level (issue 25 item 4) on a scratch one-host sim cluster
(a copy of inventory/sim at info logging, own bridge, subnet and state dir; torn down at the end):

1. site.yml with the patch: the converge and its verification play (must PASS at info);
2. ``pdfleet verify`` cascades at several kill windows: sessions killed before their first token vs the
   ABORTs the prefill handled (the patch's info count line), the share the evidence floor
   (``Settings.min_abort_share``) is chosen from;
3. site.yml with the pinned SGLang pristine: its verification play must FAIL.

Run as root (under the heavy lock):  .venv/bin/python tests/bench/measure_abort_share.py [--windows 0.05,0.5,2,4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pdfleet.paths import REPO_ROOT
from simcluster import BIN, scratch_cluster


def log(msg: str) -> None:
    print(f"[measure] {msg}", file=sys.stderr, flush=True)


def evidence(report: dict) -> dict:
    checks = {c["name"]: c for c in report["checks"]}
    cascade, logs = checks.get("cascade", {}), checks.get("logs", {})
    return {"verdict": report["verdict"], "logs": logs.get("status"), "logs_summary": logs.get("summary", "")[:300],
            "killed": cascade.get("measured", {}).get("killed"),
            "killed_phases": cascade.get("measured", {}).get("killed_phases"),
            "killed_before_first_token": logs.get("measured", {}).get("killed_before_first_token"),
            "aborts_handled": logs.get("measured", {}).get("abort_events"),
            "client_abort_lines": logs.get("measured", {}).get("client_abort_lines")}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--windows", default="0.05,0.5,2,4")
    p.add_argument("--concurrency", type=int, default=60)
    p.add_argument("--no-pristine", action="store_true")
    args = p.parse_args()
    out: dict = {"windows": {}}
    with tempfile.TemporaryDirectory(prefix="pdfleet-share-") as tmp, scratch_cluster(Path(tmp)) as cluster:
        cluster.set_model("sglang", apply_patch=True, log_level="info")
        t0 = time.monotonic()
        proc = cluster.playbook(check=False)
        out["patched_site_s"] = round(time.monotonic() - t0, 1)
        out["patched_site_rc"] = proc.returncode
        out["patched_site"] = evidence(cluster.latest_report())
        log(f"patched site.yml: rc {proc.returncode} in {out['patched_site_s']} s: {out['patched_site']}")
        if proc.returncode != 0:
            log(proc.stdout[-4000:])
        for w in args.windows.split(","):
            report = Path(tmp) / f"w{w}.json"
            t0 = time.monotonic()
            subprocess.run([str(BIN / "pdfleet"), "verify", "-i", str(cluster.inventory), "--cycles", "1",
                            "--concurrency", str(args.concurrency), "--window", w, "--skip", "bench",
                            "--min-abort-share", "0", "--report", str(report)],
                           cwd=REPO_ROOT, capture_output=True, text=True, timeout=900, check=False)
            row = evidence(json.loads(report.read_text()))
            row["wall_s"] = round(time.monotonic() - t0, 1)
            out["windows"][w] = row
            log(f"window {w}: {row}")
        if not args.no_pristine:
            cluster.set_model("sglang", apply_patch=False)
            t0 = time.monotonic()
            proc = cluster.playbook(check=False)
            out["pristine_site_s"] = round(time.monotonic() - t0, 1)
            out["pristine_site_rc"] = proc.returncode
            out["pristine_site"] = evidence(cluster.latest_report())
            log(f"pristine site.yml: rc {proc.returncode} in {out['pristine_site_s']} s: {out['pristine_site']}")
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
