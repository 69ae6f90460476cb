#!/usr/bin/env bash
# Runs every check and test of redlockd: the one command the README gives.
# Installs redis-server with apt-get when it is missing (tests start their own
# redis-server processes on free loopback ports and stop them by PID).
set -euo pipefail
cd "$(dirname "$0")/.."

# --load: run everything with every core kept busy by scripts/load.sh (one
# spinning process per core), as on a laptop running other work or a shared
# CI runner; the tests must pass under it too.
load=""
case "${1:-}" in
  "") ;;
  --load) load=1 ;;
  *) echo "usage: bash scripts/test.sh [--load]" >&2; exit 64 ;;
esac
if [ -n "$load" ]; then
  bash scripts/load.sh "$(nproc)" 3600 &
  load_pid=$!
  trap 'kill "$load_pid" 2>/dev/null || true; wait "$load_pid" 2>/dev/null || true' EXIT
  echo "load: $(nproc) spinning processes (scripts/load.sh, PID $load_pid)"
fi

step() { printf "\n== [%ss] %s\n" "$SECONDS" "$*"; } # with the seconds since the start

REDOCLY_CLI=2.77.0 # the pinned @redocly/cli that lints openapi.yaml

sudo=""
if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
if ! command -v redis-server >/dev/null 2>&1; then
  step "installing redis-server (apt-get)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server >/dev/null
fi
redis-server --version

# need_npm installs nodejs and npm with apt-get when npm is missing.
need_npm() {
  if ! command -v npm >/dev/null 2>&1; then
    step "installing nodejs and npm (apt-get)"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nodejs npm >/dev/null
  fi
}

# The Python client's tests install it into fresh venvs (python3 -m venv with
# pip: Debian's python3-venv).
if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  step "installing python3 and python3-venv (apt-get)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3 python3-venv >/dev/null
fi

step "go generate leaves no diff (api/ is generated from openapi.yaml)"
go generate ./...
if [ -d .git ] && [ -n "$(git status --porcelain -- api client openapi.yaml)" ]; then
  git status --porcelain -- api client openapi.yaml
  git diff -- api client | head -50
  echo "api/ or client/ is not up to date with openapi.yaml: run 'go generate ./...' and commit" >&2
  exit 1
fi

step "lint openapi.yaml (@redocly/cli $REDOCLY_CLI, recommended rules, see redocly.yaml)"
redocly_dir="${XDG_CACHE_HOME:-$HOME/.cache}/redlockd/redocly-cli-$REDOCLY_CLI"
if [ ! -x "$redocly_dir/node_modules/.bin/redocly" ]; then
  need_npm
  npm install --prefix "$redocly_dir" --no-audit --no-fund --loglevel=error "@redocly/cli@$REDOCLY_CLI"
fi
# No telemetry, no update notice; any warning fails the run like an error.
lint="$(DO_NOT_TRACK=1 REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true \
  "$redocly_dir/node_modules/.bin/redocly" lint --format=stylish openapi.yaml 2>&1)" || { echo "$lint" >&2; exit 1; }
echo "$lint" | grep -v '^$'
if echo "$lint" | grep -qE '^ +[0-9]+:[0-9]+ +warning '; then
  echo "redocly lint warned: mend openapi.yaml, or explain the exception in redocly.yaml" >&2
  exit 1
fi

step "clients/js types are up to date with openapi.yaml (openapi-typescript, tsc)"
need_npm
npm ci --prefix clients/js --no-audit --no-fund --loglevel=error
npm run --prefix clients/js --silent generate
npm run --prefix clients/js --silent typecheck
if [ -d .git ] && [ -n "$(git status --porcelain -- clients/js/src/schema.d.ts)" ]; then
  git diff -- clients/js/src/schema.d.ts | head -50
  echo "clients/js/src/schema.d.ts is not up to date with openapi.yaml: run 'npm run --prefix clients/js generate' and commit" >&2
  exit 1
fi

# client/ is a module of its own (the Go client, with a small graph of its
# own); the root module uses it through a replace directive. Every Go check
# below runs on both.
step "go.mod and go.sum are tidy (the root module and client/)"
for dir in . client; do
  if ! go -C "$dir" mod tidy -diff; then
    echo "$dir/go.mod or $dir/go.sum is not tidy: run 'go mod tidy' in $dir and commit" >&2
    exit 1
  fi
done

step "gofmt"
unformatted="$(gofmt -l $(find . -name '*.go' -not -path './.git/*'))"
if [ -n "$unformatted" ]; then
  echo "not gofmt-ed:" >&2
  echo "$unformatted" >&2
  exit 1
fi

step "go vet"
go vet ./...
go -C client vet ./...

step "staticcheck"
go tool staticcheck ./...
# The root module's staticcheck (its go.mod's tool), run in the client's module.
staticcheck_dir="$(mktemp -d)"
go build -o "$staticcheck_dir/staticcheck" honnef.co/go/tools/cmd/staticcheck
(cd client && "$staticcheck_dir/staticcheck" ./...)
rm -rf "$staticcheck_dir"

step "go test -race"
# Three go test processes at once, each mostly waiting on redis-servers,
# gateways, TTLs and faults rather than computing (all but the soaks):
# - the suites of the JS and Python clients (node --test and unittest under
#   tests/, the longest tests): a process of their own, so that they start
#   at once instead of whenever the order of tests/' parallel tests reaches
#   them (go test starts parallel tests in no set order);
# - the root module's packages, with tests/ first on the list (go test
#   builds and runs packages in list order, -p at a time) and four of its
#   parallel tests at a time;
# - the Go client's module.
clients='^TestClient(JS|Python)$'
# The soaks: every test of tests/soak_test.go (run on their own, below).
soaks="^($(sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' tests/soak_test.go | paste -sd'|'))\$"
if [ "$soaks" = '^()$' ]; then echo "no tests found in tests/soak_test.go" >&2; exit 1; fi
run_prefixed() { # name, command...: runs the command, its output prefixed
  local name=$1; shift
  "$@" > >(sed "s/^/$name: /") 2>&1
}
run_prefixed "client suites" go test -race -count=1 -timeout 15m -run "$clients" ./tests &
suites_pid=$!
run_prefixed "client module" go -C client test -race -count=1 -timeout 10m ./... &
client_pid=$!
failed=0
go test -race -count=1 -p 3 -parallel 4 -timeout 20m -skip "$clients|$soaks" ./tests ./... || failed=1
wait "$suites_pid" || failed=1
wait "$client_pid" || failed=1
if [ "$failed" != 0 ]; then exit 1; fi

# Then the soaks (the tests of tests/soak_test.go) on their own: their
# gateways must reach healthy nodes through the fault proxies within a node
# timeout of 100 ms to grant enough locks to prove anything, and while the
# step above runs (compiles of the tests' own builds, the bench, the race
# detector) the load average of a 2-core machine peaks between 10 and 16,
# where a run could grant nothing for a minute. Alone, two at a time, they
# take under two minutes, with room for a busy machine (--load, or a shared
# runner's neighbours).
step "go test -race: the soaks"
go test -race -count=1 -parallel 2 -timeout 10m -run "$soaks" ./tests
if [ -n "$load" ]; then echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"; fi
