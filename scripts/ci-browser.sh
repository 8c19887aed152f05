#!/usr/bin/env bash
# Headless Chromium for the `browser` tests (escher view): Debian's package, if it is missing.
# The tests drive it with Playwright (the Python package, from the test extra) through
# executable_path=/usr/bin/chromium; nothing is downloaded besides the Debian package.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "ci-browser: no apt-get here; install chromium by hand (the browser tests skip)" >&2
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null
chromium --version
