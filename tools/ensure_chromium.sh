#!/usr/bin/env bash
# Install Debian's Chromium for the browser tests if it is missing (the machine's package
# manager; no browser download of Playwright's own).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
echo "browser tests: installing Debian's chromium"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
chromium --version
