"""Which distribution a simulated host REPORTS (the host variable ``pdfleet_sim_os``).

Every sim host is a Debian 12 container built from the one golden image. A host may instead report another
distribution: `pdfleet sim up` writes that distribution's identification files (``/etc/os-release``,
``/etc/debian_version``, ``/etc/lsb-release``, ...) into the host, so a role's probe (which reads them, as Ansible's
facts do) takes the host for it. Only the identification changes: underneath it is still Debian 12 with apt and
dpkg, its packages and its kernel. That is what lets the driver role's Ubuntu branch run against stand-in packages
with Ubuntu's names; it says nothing about Ubuntu's own archive, its Python or its kernel packages.

`up` writes them when a host's choice changed (also on a running host, where they take effect at once; the host's
directory records what it reports), and a host back at the image's own distribution gets the image's files back.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .hosttypes import DEFAULT_OS, SimError


def _os_release(fields: dict[str, str], name: str) -> str:
    lines = [f"# pdfleet sim: a Debian 12 container that reports {name} (pdfleet_sim_os); not that distribution"]
    lines += [f'{key}="{value}"' for key, value in fields.items()]
    return "\n".join(lines) + "\n"


def _ubuntu(version: str, point: str, codename: str, debian_base: str) -> dict[str, str]:
    name = f"ubuntu-{version}"
    release = {"PRETTY_NAME": f"Ubuntu {point} LTS", "NAME": "Ubuntu", "VERSION_ID": version,
               "VERSION": f"{point} LTS ({codename.title()})", "VERSION_CODENAME": codename, "ID": "ubuntu",
               "ID_LIKE": "debian", "UBUNTU_CODENAME": codename}
    return {
        "etc/os-release": _os_release(release, name),
        "etc/lsb-release": f"DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE={version}\nDISTRIB_CODENAME={codename}\n"
                           f'DISTRIB_DESCRIPTION="Ubuntu {point} LTS"\n',
        "etc/debian_version": f"{debian_base}/sid\n",  # what Ubuntu ships there
    }


# The distributions a sim host can report: the identification files written into the host (relative to its
# root). The image's own distribution has none: its files stay as the image has them.
REPORTED: dict[str, dict[str, str]] = {
    DEFAULT_OS: {},
    "ubuntu-22.04": _ubuntu("22.04", "22.04.5", "jammy", "bookworm"),
    "ubuntu-24.04": _ubuntu("24.04", "24.04.3", "noble", "trixie"),
    # Distributions the roles do not support (to show that they are refused before anything changes):
    "debian-11": {
        "etc/os-release": _os_release({"PRETTY_NAME": "Debian GNU/Linux 11 (bullseye)", "NAME": "Debian GNU/Linux",
                                       "VERSION_ID": "11", "VERSION": "11 (bullseye)", "VERSION_CODENAME": "bullseye",
                                       "ID": "debian"}, "debian-11"),
        "etc/debian_version": "11.11\n",
    },
    "fedora-41": {
        "etc/os-release": _os_release({"NAME": "Fedora Linux", "VERSION": "41 (Server Edition)", "ID": "fedora",
                                       "VERSION_ID": "41", "PRETTY_NAME": "Fedora Linux 41 (Server Edition)",
                                       "VARIANT_ID": "server"}, "fedora-41"),
        "etc/fedora-release": "Fedora release 41 (Forty One)\n",
        "etc/redhat-release": "Fedora release 41 (Forty One)\n",
    },
}

# Every file any entry writes: at each `up` each one is put back as the image has it first.
MANAGED: tuple[str, ...] = tuple(sorted({path for files in REPORTED.values() for path in files}))


def validate_os(host: str, name: str) -> None:
    if name not in REPORTED:
        raise SimError(f"sim host {host}: pdfleet_sim_os {name!r} is not a distribution the sim can report; use one of "
                       f"{', '.join(REPORTED)} (the host stays a Debian 12 container; only what it reports changes)")


def apply(root: Path, golden: Path, name: str, record: Path) -> bool:
    """Make the host at `root` (its mounted overlay) report `name`, unless `record` says it already does: each
    managed file as the golden image has it (a file, a symbolic link, or absent), then the distribution's own
    files. True when something was written."""
    reported = record.read_text().strip() if record.is_file() else DEFAULT_OS
    if reported == name:
        return False
    for rel in MANAGED:
        path, original = root / rel, golden / rel
        if path.is_symlink() or path.exists():
            path.unlink()
        if original.is_symlink():
            path.symlink_to(os.readlink(original))
        elif original.is_file():
            shutil.copy2(original, path)
    for rel, content in REPORTED[name].items():
        path = root / rel
        path.unlink(missing_ok=True)  # Debian's /etc/os-release is a link into /usr/lib: replace it, not its target
        path.write_text(content)
        path.chmod(0o644)
    record.write_text(name + "\n")
    return True
