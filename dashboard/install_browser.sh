#!/usr/bin/env bash
# The browser for the dashboard's browser tests (tests/browser/): Debian's chromium, driven by
# the `playwright` Python package from the dev extras. Never `playwright install`: it downloads
# its own browsers from a CDN, and the tests launch /usr/bin/chromium instead.
# Run as root (CI). Does nothing when chromium is already there; without apt it says so and
# exits 0, and the browser tests skip with that reason.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install_browser.sh: no apt-get here; install chromium at /usr/bin/chromium by hand (the browser tests skip without it)" >&2
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install_browser.sh: run as root to apt-get install chromium (the browser tests skip without it)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
echo "install_browser.sh: $(/usr/bin/chromium --version 2>/dev/null || echo chromium) installed"
