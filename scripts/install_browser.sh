#!/usr/bin/env bash
# Installs Debian's Chromium for the browser tests (tests/e2e), only if it is missing.
# Idempotent: a second run does nothing but say so. Needs root (CI and dev machines run as root).
set -euo pipefail

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
    echo "install_browser: $CHROMIUM already present ($("$CHROMIUM" --version 2>/dev/null || echo 'version unknown')); nothing to do"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    SUDO=sudo
else
    SUDO=
fi

echo "install_browser: $CHROMIUM missing; installing Debian's chromium package with apt-get"
export DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq chromium >/dev/null

if [ ! -x "$CHROMIUM" ]; then
    echo "install_browser: apt-get finished but $CHROMIUM is still missing" >&2
    exit 1
fi
echo "install_browser: installed $("$CHROMIUM" --version 2>/dev/null || echo chromium)"
