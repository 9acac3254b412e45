"""The cuda_toolkit role's one probe of a host (pdfleet_probe: settings on stdin; prints JSON): the installed versions
of the packages it names (one dpkg-query), whether the CUDA repository is configured, the profile script's state and
`nvcc --version`. The role's tasks run only for what differs. Changes nothing."""

import json
import os
import sys

from pdfleet_probe_common import installed_packages, run, stat_of


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    nvcc = run([cfg["nvcc"], "--version"])
    installed = installed_packages()
    print(json.dumps({"packages": {p: installed[p] for p in cfg.get("packages", []) if p in installed},
                      "source_exists": os.path.exists(cfg["source"]),
                      "profile": stat_of(cfg["profile"], digest=True),
                      "nvcc": {"rc": nvcc["rc"], "stdout": nvcc["stdout"], "msg": nvcc["stderr"].strip()}}))


main()
