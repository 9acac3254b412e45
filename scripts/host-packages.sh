#!/usr/bin/env bash
# Install the Debian packages the control machine needs (only the missing ones; needs root for that).
# systemd-container/mmdebstrap/nftables: the simulated cluster; systemd: systemd-analyze for unit checks;
# patch: applying the SGLang patch series; openssh-client: reaching the hosts; gpg: signing the sim's stand-in
# NVIDIA repository; python3-pip: the sim runtime's wheels download with this machine's python3 while `make site`
# installs the venv (pdfleet_sim.build).
# With --tests (make test), also prometheus (promtool, to unit-test the alert rules; the hosts validate them with
# their own) and chromium-headless-shell: the headless browser the report-page tests load the verification and
# rollout pages in (tests/htmlreport); `make site` needs neither.
set -euo pipefail
packages=(mmdebstrap systemd-container nftables systemd patch openssh-client iproute2 python3-venv python3-pip gpg)
if [ "${1:-}" = "--tests" ]; then
  packages+=(prometheus chromium-headless-shell)
elif [ $# -gt 0 ]; then
  echo "pdfleet: usage: scripts/host-packages.sh [--tests]" >&2
  exit 2
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "pdfleet: missing Debian packages: ${missing[*]}; install them as root (apt-get install ${missing[*]})" >&2
  exit 2
fi
echo "pdfleet: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
