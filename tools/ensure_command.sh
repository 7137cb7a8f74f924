#!/usr/bin/env bash
# Usage: tools/ensure_command.sh COMMAND DEBIAN_PACKAGE
# Install a Debian package with the machine's package manager if COMMAND is missing: the book
# build needs `npm` (once, to fetch the ipywidgets scripts from the npm registry) and the browser
# tests need `chromium` (Debian's build; never a browser download of Playwright's own).
set -euo pipefail
command=$1 package=$2
if command -v "$command" >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "$command is missing and this machine has no apt-get: install the package providing it ($package)" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
echo "setup: installing Debian's $package (for $command)"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$package" >/dev/null
"$command" --version
