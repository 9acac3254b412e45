"""`make test`'s runner: the default suite as two pytest processes at once, the fleet scenario (tests/scenario)
beside everything else.

The suite waits far more than it computes (CI's 2 cores sit mostly idle: services starting, health intervals,
kill windows), and the fleet scenario stands up a four-host fleet of its own on its own subnet (tests/simcluster.py
claimed_net), sharing nothing with the rest but the image caches. So the two run at once:

1. the caches both would build on a fresh machine are built first, once (the golden image, the heavy runtime and
   the stand-in repository; each builder is also safe against a concurrent one, this only avoids doing it twice);
2. ``pytest tests/scenario`` starts in the background, its output kept in reports/scenario.log and its JUnit XML in
   reports/junit-scenario.xml;
3. ``pytest --ignore=tests/scenario`` runs in the foreground (reports/junit.xml), as `make test` always did;
4. the scenario's output is printed when both are done, and the exit status is the first failure's (pytest's 5,
   no test collected, is a failure too).

With arguments (``make test PYTEST_ARGS=...``, `make test-long`), it runs one pytest with them, as before:
    python tests/suite.py [--junitxml=... --durations=N] [pytest args ...]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest"]
SCENARIO = "tests/scenario"
REPORTS = REPO / "reports"
SCENARIO_LOG = REPORTS / "scenario.log"


def say(msg: str) -> None:
    print(f"pdfleet suite: {msg}", flush=True)


def failed(rc: int, what: str) -> int:
    """pytest's exit status as the suite's (5, no test collected, is a failure: a suite that ran nothing proved
    nothing)."""
    if rc == 5:
        print(f"pdfleet: pytest collected no tests ({what}): that is a failure", file=sys.stderr, flush=True)
    return rc


def prepare_caches() -> None:
    """Build once what both halves would otherwise build at the same time on a fresh machine."""
    from pdfleet_sim import aptrepo
    from pdfleet_sim.hosttypes import DEFAULT_CACHE_DIR
    from pdfleet_sim.image import ensure_images

    start = time.monotonic()
    golden, runtime = ensure_images(DEFAULT_CACHE_DIR, say, with_runtime=True)
    aptrepo.ensure_built(DEFAULT_CACHE_DIR)
    say(f"caches ready in {time.monotonic() - start:.0f} s ({golden.name}, {runtime.name if runtime else '-'})")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _exit_on_term(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def run_split(report: list[str]) -> int:
    """The scenario in the background and the rest in the foreground; the first failure's status."""
    REPORTS.mkdir(exist_ok=True)
    prepare_caches()
    durations = [a for a in report if a.startswith("--durations")]
    with SCENARIO_LOG.open("w") as log:
        say(f"the fleet scenario ({SCENARIO}) runs beside the rest; its output: {SCENARIO_LOG}")
        # its own session (a Ctrl-C reaches it once, from here), SIGINT at its default whatever this process
        # inherited (a background job's is ignored), so the SIGINT sent below makes pytest tear its fleet down
        scenario = subprocess.Popen([*PYTEST, *durations, f"--junitxml={REPORTS / 'junit-scenario.xml'}", SCENARIO],
                                    cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                    preexec_fn=_default_sigint)
        previous = signal.signal(signal.SIGTERM, _exit_on_term)  # a CI timeout: the clusters are torn down
        rest_proc = subprocess.Popen([*PYTEST, *report, f"--ignore={SCENARIO}"], cwd=REPO, preexec_fn=_default_sigint)
        try:
            rest = rest_proc.wait()
            if scenario.poll() is None:
                say(f"the rest is done (exit {rest}); waiting for the fleet scenario")
            scenario_rc = scenario.wait()
        except BaseException as exc:
            # interrupted: each pytest tears its clusters down on one SIGINT (pytest's Ctrl-C), never killed
            # outright. A Ctrl-C at the terminal reached the rest already (this process group); a second one would
            # cut its teardown short. The scenario, in its own session, gets it from here either way.
            if rest_proc.poll() is None and not isinstance(exc, KeyboardInterrupt):
                rest_proc.send_signal(signal.SIGINT)
            if scenario.poll() is None:
                os.killpg(scenario.pid, signal.SIGINT)
            for proc in (rest_proc, scenario):
                try:
                    proc.wait(timeout=600)
                except subprocess.TimeoutExpired:
                    proc.kill()
            raise
        finally:
            signal.signal(signal.SIGTERM, previous)
    print(f"\n{'=' * 30} the fleet scenario ({SCENARIO}), run beside the rest {'=' * 30}", flush=True)
    sys.stdout.write(SCENARIO_LOG.read_text(errors="replace"))
    sys.stdout.flush()
    say(f"exit: the rest {rest}, the fleet scenario {scenario_rc}")
    for rc, what in ((rest, "the rest"), (scenario_rc, SCENARIO)):
        if rc != 0:
            return failed(rc, what)
    return 0


def main(argv: list[str]) -> int:
    report = [a for a in argv if a.startswith(("--durations", "--junitxml"))]
    chosen = [a for a in argv if a not in report]
    if chosen:  # the caller picked tests or options: one pytest, as asked
        return failed(subprocess.run([*PYTEST, *argv], cwd=REPO, check=False).returncode, " ".join(chosen))
    return run_split(report)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
