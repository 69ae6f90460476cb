#!/usr/bin/env bash
# Installs Debian's postgresql with apt-get when it is missing, for the bench's
# comparison with Postgres advisory locks (docs/measuring.md): the bench starts
# a postgres of its own (initdb into a temporary directory, a free loopback
# port, stopped by PID) and skips the comparison when postgres is not
# installed. Debian keeps the binaries in /usr/lib/postgresql/<version>/bin,
# where the bench looks for them; as root the bench runs them as the user
# postgres that the package creates. The tests do not need it.
set -euo pipefail

installed() {
  command -v postgres >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null
}

sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
if ! installed; then
  echo "installing postgresql (apt-get)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql >/dev/null
fi
ls -d /usr/lib/postgresql/*/bin 2>/dev/null || command -v postgres
