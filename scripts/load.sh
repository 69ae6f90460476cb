#!/usr/bin/env bash
# Keeps every core busy: one spinning process per core (nproc, or $1), each
# ending by itself after $2 seconds (default 3600) if nothing stops it first.
# For checking that the tests hold on a busy machine: `bash scripts/test.sh
# --load` runs the suite with it and stops it by PID when the suite ends.
set -euo pipefail
n="${1:-$(nproc)}"
limit="${2:-3600}"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT INT TERM
for _ in $(seq "$n"); do
  bash -c 'end=$((SECONDS + $1)); while [ "$SECONDS" -lt "$end" ]; do :; done' spin "$limit" &
  pids+=("$!")
done
wait
