#!/usr/bin/env bash
# Runs every check and test of redlockd: the one command the README gives.
# Installs redis-server with apt-get when it is missing (tests start their own
# redis-server processes on free loopback ports and stop them by PID).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

if ! command -v redis-server >/dev/null 2>&1; then
  step "installing redis-server (apt-get)"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
fi
redis-server --version

step "go generate leaves no diff (api/ is generated from openapi.yaml)"
go generate ./...
if [ -d .git ] && [ -n "$(git status --porcelain -- api client openapi.yaml)" ]; then
  git status --porcelain -- api client openapi.yaml
  git diff -- api client | head -50
  echo "api/ or client/ is not up to date with openapi.yaml: run 'go generate ./...' and commit" >&2
  exit 1
fi

step "go.mod and go.sum are tidy"
if ! go mod tidy -diff; then
  echo "go.mod or go.sum is not tidy: run 'go mod tidy' and commit" >&2
  exit 1
fi

step "gofmt"
unformatted="$(gofmt -l $(find . -name '*.go' -not -path './.git/*'))"
if [ -n "$unformatted" ]; then
  echo "not gofmt-ed:" >&2
  echo "$unformatted" >&2
  exit 1
fi

step "go vet"
go vet ./...

step "staticcheck"
go tool staticcheck ./...

step "go test -race"
go test -race -count=1 -timeout 20m ./...
