"""The cuda_toolkit role's one probe of a host (pdfleet_probe: settings on stdin; prints JSON): the installed versions
of the packages it names (one dpkg-query), whether the CUDA repository is configured, the profile script's state and
`nvcc --version`, and what differs from the wanted state (the settings' "want"), by the task of tasks/apply.yml
that puts it back: the role's tasks run only for what differs. Changes nothing."""

from __future__ import annotations

import json
import os
import sys

from pdfleet_probe_common import installed_packages, run, stat_of

# The entries of "differs", each gating one task of tasks/apply.yml (when: __cuda_toolkit_differs['<entry>']).
DIFFERS = ("package", "profile")


def differs(cfg: dict, found: dict) -> dict[str, bool]:
    """What differs between the wanted state (``cfg["want"]``) and what the probe found, by entry of DIFFERS.

    want: package (the toolkit's package name), package_version (an exact version, "" for any), profile (the
    profile script's {sha256, mode, owner, group}, or None when the role does not manage it).
      package  the toolkit's package is not installed, or not at the pinned version when one is pinned;
      profile  the profile script is managed and is missing or not as wanted.
    """
    want = cfg["want"]
    installed = found["packages"].get(want["package"])
    return {"package": installed is None or (len(want["package_version"]) > 0
                                             and installed != want["package_version"]),
            "profile": want["profile"] is not None and found["profile"] != want["profile"]}


def main() -> None:
    """Read the settings, look at the host, print what was found and what differs."""
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    nvcc = run([cfg["nvcc"], "--version"])
    installed = installed_packages()
    found = {"packages": {p: installed[p] for p in cfg.get("packages", []) if p in installed},
             "source_exists": os.path.exists(cfg["source"]),
             "profile": stat_of(cfg["profile"], digest=True),
             "nvcc": {"rc": nvcc["rc"], "stdout": nvcc["stdout"], "msg": nvcc["stderr"].strip()}}
    print(json.dumps({**found, "differs": differs(cfg, found)}))


if __name__ == "__main__":
    main()
