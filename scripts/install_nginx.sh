#!/usr/bin/env bash
# Installs Debian's nginx for the slow-client drill (scripts/slow_clients.py and its
# test), only if it is missing. Idempotent. Needs root (CI and dev machines run as root).
set -euo pipefail

if command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
echo "install_nginx: nginx missing; installing Debian's nginx-light package with apt-get"
export DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq nginx-light >/dev/null
# The package starts a server on port 80 when installed outside a container: not ours to run.
$SUDO service nginx stop >/dev/null 2>&1 || $SUDO pkill -x nginx || true
echo "install_nginx: installed $(/usr/sbin/nginx -v 2>&1)"
