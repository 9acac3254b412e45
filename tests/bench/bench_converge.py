"""Benchmark of a no-op converge: what a second `site.yml` costs next to asking the hosts what they are.

On a scratch copy of a sim inventory (default inventory/sim: one host; `--inventory inventory/sim-fleet` for
the three-host fleet; own bridge, subnet and state dir, torn down at the end) it
  1. converges the cluster with site.yml (its first run after the caches exist: hosts, provision, deploy,
     verification), and reports that time per stage;
  2. runs `site.yml --skip-tags verify` again (changed=0 expected) and times it: wall clock, per stage
     (play), per role and the slowest tasks, from the ansible.posix.json callback;
  3. times `ansible all -m ansible.builtin.setup` on the same hosts (median of three runs before and of three
     after the no-op, averaged) and prints the ratio;
  4. runs `site.yml --tags verify` with the protocol's defaults (as `make site` runs it; the first converge
     uses one cascade cycle) and reports the verification play's time beyond its kill windows (cascade cycles x
     window_s from the verdict report).
With several `--inventory` options the fleet ratios (each no-op converge / the first one's) are printed too.
`--cold` times a cold `make site` but for its host packages (apt), on a machine whose caches exist: the golden image
and CPU runtime built in the background into an empty cache directory while the venv installs from an empty pip
cache, then site.yml with its verification (`--cold-howto` prints the phases).

Run as root:  .venv/bin/python tests/bench/bench_converge.py [--inventory DIR ...] [--json]
              [--ansible-arg=-e --ansible-arg=pdfleet_provision_serial=100%]
              .venv/bin/python tests/bench/bench_converge.py --cold     # the cold image/runtime build instead
Each no-op figure also says where the CPU went (the controller's and the whole machine's busy share): on one
machine the simulated hosts share its cores with the controller.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: the scratch-cluster helper

from pdfleet.paths import DEFAULT_INVENTORY, REPO_ROOT
from simcluster import SITE, ScratchCluster, scratch_cluster

BIN = Path(sys.executable).parent
STAGES = ("Preflight", "Sim", "Provision", "Deploy", "Verify")

COLD_HOWTO = """\
Cold `make site` on a fresh Debian/Ubuntu machine (no /var/cache/pdfleet-sim, no .venv, an empty pip cache):
  time make site        # its steps, in order:
    scripts/host-packages.sh                                  # apt: host packages
    python3 -m pdfleet_sim.build --start                      # golden image + CPU runtime, in the background
    .venv (the Makefile's $(STAMP) recipe)                    # meanwhile
    .venv/bin/ansible-playbook site.yml                       # prints the time of each play at the end
  .venv/bin/pdfleet sim down
`--cold` runs all of it but apt, into empty caches, on a machine that has them."""


NOOP_RUNS = 3  # no-op converges per inventory; the median is the figure

def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def _ts(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


EXTRA_ARGS: list[str] = []  # --ansible-arg: passed to every ansible-playbook run


def machine_busy_s() -> float:
    """CPU seconds this machine's cores have been busy since boot (/proc/stat: all but idle and iowait)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


CPU: dict[str, dict[str, float]] = {}  # per playbook run label: where the CPU went (filled by playbook())


def playbook(cluster: ScratchCluster, *extra: str,
             verify_args: tuple[str, ...] = ("--cycles", "1")) -> tuple[float, dict]:
    """Run site.yml with the JSON callback; (wall seconds, the callback's document). Also records in CPU the
    controller's CPU (ansible-playbook and what it waited for) and the whole machine's busy CPU during the run:
    on one machine the simulated hosts' modules share its cores with the controller, so a fleet that is slower
    than one host while the cores were saturated is bound by this machine, not by the playbooks."""
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_NOCOLOR="1",
               ANSIBLE_JSON_INDENT="0")
    verify = json.dumps({"pdfleet_verify_args": list(verify_args),
                         "pdfleet_verify_reports_dir": str(cluster.reports_dir)})
    t0, busy0, own0 = time.monotonic(), machine_busy_s(), children_cpu_s()
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(cluster.inventory), str(SITE), "-e", verify,
                           *EXTRA_ARGS, *extra], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    busy, own = machine_busy_s() - busy0, children_cpu_s() - own0
    cores = os.cpu_count() or 1
    CPU[" ".join(extra) or "site.yml"] = {"controller_cpu_s": round(own, 1), "machine_busy_cpu_s": round(busy, 1),
                                          "cores": cores, "machine_busy_share": round(busy / (wall * cores), 2)}
    start = proc.stdout.find("{")
    if proc.returncode != 0 or start < 0:
        raise SystemExit(f"site.yml {' '.join(extra)} failed (rc {proc.returncode}):\n{proc.stdout[-4000:]}\n"
                         f"{proc.stderr[-2000:]}")
    return wall, json.loads(proc.stdout[start:])


def stage_of(play_name: str) -> str:
    head = play_name.split("|", 1)[0].strip()
    return head if head in STAGES else play_name


def profile(doc: dict) -> dict[str, object]:
    """Per stage, per role, tasks run and the slowest tasks of one callback document."""
    stages: dict[str, float] = defaultdict(float)
    roles: dict[str, float] = defaultdict(float)
    tasks: list[tuple[float, str]] = []
    run = 0
    for play in doc["plays"]:
        d = play["play"]["duration"]
        if "end" in d:
            stages[stage_of(play["play"]["name"])] += _ts(d["end"]) - _ts(d["start"])
        for task in play["tasks"]:
            td = task["task"]["duration"]
            if "end" not in td:
                continue
            secs = _ts(td["end"]) - _ts(td["start"])
            name = task["task"]["name"]
            role = name.split(" : ", 1)[0] if " : " in name else "(play)"
            roles[role] += secs
            tasks.append((secs, f"{stage_of(play['play']['name'])} / {name}"))
            if any(not r.get("skipped") for r in task["hosts"].values()):
                run += 1
    changed = {h: s["changed"] for h, s in doc["stats"].items()}
    return {"stages_s": {k: round(v, 2) for k, v in stages.items()},
            "roles_s": {k: round(v, 2) for k, v in sorted(roles.items(), key=lambda kv: -kv[1])},
            "tasks_total": len(tasks), "tasks_run": run, "changed": changed,
            "slowest_tasks": [(round(s, 2), n) for s, n in sorted(tasks, reverse=True)[:12]]}


def setup_time(cluster: ScratchCluster, runs: int = 3) -> float:
    """The median wall time of `runs` x `ansible all -m setup` (one sample is at the mercy of a loaded machine)."""
    samples = []
    for _ in range(runs):
        t0 = time.monotonic()
        proc = subprocess.run([str(BIN / "ansible"), "-i", str(cluster.inventory), "all", "-m",
                               "ansible.builtin.setup"], cwd=REPO_ROOT, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"ansible -m setup failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        samples.append(time.monotonic() - t0)
    return sorted(samples)[len(samples) // 2]


def kill_windows_s(cluster: ScratchCluster) -> tuple[float, dict[str, float]]:
    """cycles x window_s of the cascade check in the newest verdict report, and each check's duration."""
    report = cluster.latest_report()
    checks = report.get("checks", [])
    durations = {c.get("name", "?"): round(float(c.get("duration_s", 0)), 1) for c in checks}
    for check in checks:
        if check.get("name") == "cascade":
            t = check.get("thresholds", {})
            return float(t.get("cycles", 1)) * float(t.get("window_s", 0)), durations
    raise SystemExit(f"no cascade check in the report: {sorted(report)}")


def bench_one(source: Path, root: Path) -> dict[str, object]:
    with scratch_cluster(root, source=source) as cluster:
        log(f"{source}: first converge (hosts, provision, deploy, verification)")
        first_wall, first = playbook(cluster)
        cluster.wait_ready()
        log(f"{source}: ansible -m setup (3 times), the no-op converge (--skip-tags verify), setup again")
        before = setup_time(cluster)
        # three no-op runs, the median reported: this machine's speed varies by a third within minutes
        noops = sorted(((*playbook(cluster, "--skip-tags", "verify"), dict(CPU["--skip-tags verify"]))
                        for _ in range(NOOP_RUNS)), key=lambda run: run[0])
        noop_wall, noop, noop_cpu = noops[len(noops) // 2]
        setup_s = (before + setup_time(cluster)) / 2
        log(f"{source}: verification alone (--tags verify), with the protocol's defaults as site.yml runs it")
        verify_wall, verify = playbook(cluster, "--tags", "verify", verify_args=())
        windows, check_s = kill_windows_s(cluster)
    noop_prof = profile(noop)
    verify_s = profile(verify)["stages_s"].get("Verify", 0.0)
    return {
        "inventory": str(source),
        "hosts": len([h for h in noop["stats"] if h != "localhost"]),
        "first_converge_s": round(first_wall, 1),
        "first_converge_stages_s": profile(first)["stages_s"],
        "noop_converge_s": round(noop_wall, 1),
        "noop_converge_runs_s": [round(run[0], 1) for run in noops],
        "setup_s": round(setup_s, 1),
        "noop_over_setup": round(noop_wall / setup_s, 2),
        "noop": noop_prof,
        "noop_cpu": noop_cpu,
        "verify_play_s": round(verify_s, 1),
        "verify_wall_s": round(verify_wall, 1),
        "kill_windows_s": windows,
        "verify_checks_s": check_s,
        "verify_beyond_windows_over_windows": round((verify_s - windows) / windows, 2) if windows else None,
    }


def bench_cold(root: Path) -> dict[str, object]:
    """A cold `make site` but for the host packages (apt), measured on a machine whose caches exist: with an empty
    image cache ($PDFLEET_SIM_CACHE_DIR) and an empty pip cache it runs what `make site` runs, in its order: the
    background build of the golden image and the CPU runtime (the Makefile's sim-images), the project venv (the
    Makefile's $(STAMP) recipe, into a scratch directory) and site.yml with the protocol's defaults on a scratch
    copy of inventory/sim. Prints each part and each play."""
    cache, venv = root / "cold-cache", root / "venv"
    os.environ["PDFLEET_SIM_CACHE_DIR"] = str(cache)  # every sim command below, the playbook's included
    pip_cache = root / "pip-cache"
    pip_cache.mkdir()
    with scratch_cluster(root / "cold", source=DEFAULT_INVENTORY) as cluster:
        log(f"cold: sim-images (background build into the empty {cache}), the venv, then site.yml")
        t0 = time.monotonic()
        subprocess.run(["python3", "-m", "pdfleet_sim.build", "--start"], cwd=REPO_ROOT, check=True,
                       env=dict(os.environ, PYTHONPATH="scripts:scripts/sim"))
        subprocess.run(["make", "--no-print-directory", f"VENV={venv}", f"{venv}/.pdfleet-installed"], cwd=REPO_ROOT,
                       env=dict(os.environ, PIP_CACHE_DIR=str(pip_cache)), check=True, stdout=subprocess.DEVNULL)
        venv_s = time.monotonic() - t0
        log(f"cold: venv ready after {venv_s:.1f} s; site.yml")
        site_s, doc = playbook(cluster, verify_args=())
        total = time.monotonic() - t0
    plays = {}
    for play in doc["plays"]:
        d = play["play"]["duration"]
        if "end" in d:
            name = play["play"]["name"]
            plays[name] = round(plays.get(name, 0.0) + _ts(d["end"]) - _ts(d["start"]), 1)
    return {"start_to_venv_ready_s": round(venv_s, 1), "site_yml_s": round(site_s, 1),
            "total_without_apt_s": round(total, 1), "goal_s": 240, "site_yml_plays_s": plays,
            "not_measured": "host packages (apt): a fresh machine only (--cold-howto)"}


def print_figures(figures: dict) -> None:
    for run in figures["runs"]:
        print(f"== {run['inventory']} ({run['hosts']} host(s))")
        for key in ("first_converge_s", "noop_converge_s", "setup_s", "noop_over_setup", "verify_play_s",
                    "kill_windows_s", "verify_beyond_windows_over_windows"):
            print(f"  {key:36} {run[key]}")
        print(f"  {'verification checks (s)':36} {run['verify_checks_s']}")
        print(f"  {'first converge per stage':36} {run['first_converge_stages_s']}")
        noop = run["noop"]
        print(f"  {'no-op changed':36} {noop['changed']}")
        print(f"  {'no-op tasks run / total':36} {noop['tasks_run']} / {noop['tasks_total']}")
        print(f"  {'no-op CPU (controller, machine)':36} {run['noop_cpu']}")
        print(f"  {'no-op per stage (s)':36} {noop['stages_s']}")
        print(f"  {'no-op per role (s)':36} {noop['roles_s']}")
        print("  slowest no-op tasks:")
        for secs, name in noop["slowest_tasks"]:
            print(f"    {secs:6.2f}  {name}")
    cold = figures.get("cold", {})
    for key, value in cold.items():
        if key == "site_yml_plays_s":
            for play, secs in value.items():
                print(f"cold   {play[:70]:70} {secs:6.1f} s")
        else:
            print(f"cold {key:33} {value}")
    for key, value in figures.get("fleet", {}).items():
        print(f"{key:38} {value}")
    print(f"load average at the end: {figures['loadavg']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", type=Path, action="append",
                        help=f"sim inventory to copy (repeat; default {DEFAULT_INVENTORY})")
    parser.add_argument("--ansible-arg", action="append", default=[], metavar="ARG",
                        help="an extra ansible-playbook argument for every run (repeat), e.g. -e k=v")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--cold-howto", action="store_true", help="print how to measure a cold `make site`")
    parser.add_argument("--cold", action="store_true",
                        help="instead of the no-op figures: build the golden image and CPU runtime into an empty "
                             "cache and time the first converge and verification on them (several minutes)")
    args = parser.parse_args()
    if args.cold_howto:
        print(COLD_HOWTO)
        return 0
    if os.geteuid() != 0:
        print("bench_converge: run as root (the simulated cluster needs systemd-nspawn and a bridge)", file=sys.stderr)
        return 2
    EXTRA_ARGS.extend(args.ansible_arg)
    sources = args.inventory or [DEFAULT_INVENTORY]
    for s in sources:
        if not (s / "hosts.yml").is_file():
            print(f"bench_converge: {s}: no hosts.yml; pass a sim inventory directory", file=sys.stderr)
            return 2
    runs = []
    cold: dict[str, object] = {}
    with tempfile.TemporaryDirectory(prefix="pdfleet-bench-converge-") as tmp:
        if args.cold:
            cold = bench_cold(Path(tmp))
        else:
            for i, source in enumerate(sources):
                runs.append(bench_one(source, Path(tmp) / str(i)))
    figures: dict[str, object] = {"runs": runs, "loadavg": os.getloadavg()}
    if cold:
        figures["cold"] = cold
    if len(runs) > 1 and not args.cold:
        base = runs[0]["noop_converge_s"]
        figures["fleet"] = {f"noop {r['inventory']} / {runs[0]['inventory']}": round(r["noop_converge_s"] / base, 2)
                            for r in runs[1:]}
    if args.json:
        print(json.dumps(figures, indent=2))
    else:
        print_figures(figures)
        print(COLD_HOWTO)
    return 0


if __name__ == "__main__":
    sys.exit(main())
