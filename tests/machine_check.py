"""`make test` runs this first: it fails (exit 2, saying why) when the integration tests cannot run here.

Without root or systemd-nspawn (and the other tools of the simulated cluster) the integration tests of
tests/sim, tests/sim_hosts and tests/provision skip themselves, and a suite that skipped them would pass
green without having tested the bundle. `pytest` run by hand still skips them (with the reason).
"""

from __future__ import annotations

import sys

from pdfleet_sim.system import missing_tools
from simcluster import skip_reason


def problems() -> list[str]:
    out: list[str] = []
    reason = skip_reason()
    if reason:
        out.append(reason)
    missing = missing_tools()
    if missing:
        out.append(f"missing packages: apt-get install -y {' '.join(missing)}")
    return out


def main() -> int:
    found = problems()
    if not found:
        return 0
    print("pdfleet: make test cannot run the integration tests here (tests/sim, tests/sim_hosts, "
          f"tests/provision): {'; '.join(found)}. Run it as root on a Debian/Ubuntu host, or run a subset "
          "with pytest directly (it reports the skips).", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
