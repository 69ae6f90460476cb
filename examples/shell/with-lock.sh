#!/bin/sh
# with-lock.sh: run a command while holding a redlockd lock, with nothing but
# curl and a POSIX shell. It shows the protocol; `redlockd run` does the same
# job with more care (process groups, signal forwarding, SIGKILL after a grace
# period).
#
#   REDLOCKD_URL=http://127.0.0.1:8080 ./with-lock.sh nightly-backup ./backup.sh --full
#
# Environment: REDLOCKD_URL (default http://127.0.0.1:8080), LOCK_TTL_MS
# (default 30000), LOCK_WAIT_MS (how long to wait for the lock, default 0),
# REDLOCKD_API_KEY (optional bearer key).
# The command gets REDLOCKD_RESOURCE, REDLOCKD_TOKEN and REDLOCKD_FENCING_TOKEN
# in its environment: pass the fencing token to the storage it writes to.
#
# Exit status: the command's; 75 when another owner holds the lock (not
# acquired within LOCK_WAIT_MS); 69 when the gateway or a quorum is
# unavailable; 76 when the lock was lost while the command ran (it is sent
# SIGTERM); 64 on a usage error or when the gateway refused the request or
# the API key (a 4xx other than 409: a configuration error).
set -u

url=${REDLOCKD_URL:-http://127.0.0.1:8080}
ttl_ms=${LOCK_TTL_MS:-30000}
wait_ms=${LOCK_WAIT_MS:-0}
if [ $# -lt 2 ]; then
  echo "usage: $0 RESOURCE COMMAND [ARGS...]" >&2
  exit 64
fi
for ms in "$ttl_ms" "$wait_ms"; do
  case $ms in
    '' | *[!0-9]*)
      echo "with-lock: LOCK_TTL_MS and LOCK_WAIT_MS must be whole milliseconds" >&2
      exit 64
      ;;
  esac
done
resource=$1
shift
# The name goes into the URL as it is: refuse what a URL would change ("#",
# "?", a space...) rather than lock another resource or fail as unreachable.
case $resource in
  '' | *[!A-Za-z0-9._:-]*)
    echo "with-lock: RESOURCE must be 1-200 characters of [A-Za-z0-9._:-]" >&2
    exit 64
    ;;
esac

tmp=$(mktemp -d) || exit 69 # private (mode 700): holds the token and the answers

# seconds MS: MS milliseconds as seconds with a fraction, for sleep and curl.
seconds() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }

# now_ms: milliseconds since the epoch (whole seconds where date lacks %N).
now_ms() {
  t=$(date +%s%3N 2>/dev/null)
  case $t in *[!0-9]* | '') echo $(($(date +%s) * 1000)) ;; *) echo "$t" ;; esac
}

# call METHOD MAX_MS OUT [JSON]: one request to /locks/RESOURCE. It prints
# the HTTP status (000 when no answer came) and leaves the body in OUT. The
# token and the API key reach curl on stdin (-K -), never on its command line,
# where other users could see them in ps.
call() {
  {
    if [ -s "$tmp/token" ]; then printf 'header = "Lock-Token: %s"\n' "$(cat "$tmp/token")"; fi
    if [ -n "${REDLOCKD_API_KEY:-}" ]; then printf 'header = "Authorization: Bearer %s"\n' "$REDLOCKD_API_KEY"; fi
    if [ $# -ge 4 ]; then printf 'header = "Content-Type: application/json"\n'; fi
  } | if [ $# -ge 4 ]; then
    curl -s -K - -X "$1" --max-time "$(seconds "$2")" -o "$3" -w '%{http_code}' --data "$4" "$url/locks/$resource"
  else
    curl -s -K - -X "$1" --max-time "$(seconds "$2")" -o "$3" -w '%{http_code}' "$url/locks/$resource"
  fi
}

# field NAME FILE: the value of a string or number member of the JSON in FILE.
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^\",}]*\).*/\1/p" "$2" 2>/dev/null; }

# extend DEADLINE: extends the lock (valid for ttl_ms from now), trying again
# every 200ms after a 503 or no answer, until DEADLINE (ms since the epoch).
# Returns 0 when extended ($tmp/until moves on), 1 when the lock is lost: on a
# 409, on another 4xx (e.g. a revoked API key: no extension can succeed), or
# when DEADLINE passed (the reason is in $tmp/reason).
extend() {
  while :; do
    now=$(now_ms)
    left=$(($1 - now))
    if [ "$left" -le 0 ]; then
      echo "no extension succeeded before the lock's validity ended" >"$tmp/reason"
      return 1
    fi
    code=$(call PATCH $((left < ttl_ms / 3 ? left : ttl_ms / 3)) "$tmp/extend" "{\"ttl_ms\":$ttl_ms}")
    case $code in
      200)
        echo $((now + $(field validity_ms "$tmp/extend"))) >"$tmp/until"
        return 0
        ;;
      409)
        echo "the gateway says the lock is not ours any more ($(field lock_state "$tmp/extend"))" >"$tmp/reason"
        return 1
        ;;
      4??)
        echo "the gateway refused the extension (HTTP $code): $(field detail "$tmp/extend")" >"$tmp/reason"
        return 1
        ;;
    esac
    sleep 0.2
  done
}

# Until the command runs, SIGTERM, SIGINT and SIGHUP end the script (and the
# EXIT trap releases the lock if it was taken); then they are forwarded.
child=
on_signal() {
  if [ -n "$child" ]; then kill "-$1" "$child" 2>/dev/null; else exit "$2"; fi
}
trap 'on_signal TERM 143' TERM
trap 'on_signal INT 130' INT
trap 'on_signal HUP 129' HUP

cleanup() {
  status=$?
  if [ -n "${keeper:-}" ]; then kill "$keeper" 2>/dev/null; fi
  if [ -s "$tmp/token" ]; then
    code=$(call DELETE 5000 "$tmp/release")
    case $code in
      204) ;;
      409)
        echo "with-lock: $resource was not held at release ($(field lock_state "$tmp/release")): the work may not have been exclusive" >&2
        status=76
        ;;
      *) echo "with-lock: could not confirm the release of $resource (HTTP $code): it expires within ${ttl_ms}ms" >&2 ;;
    esac
  fi
  if [ -e "$tmp/lost" ]; then status=76; fi
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT

# Acquire: the gateway waits up to wait_ms for the lock. Validity counts from
# before the request, so the round trip is subtracted from it.
start=$(now_ms)
code=$(call POST $((wait_ms + 10000)) "$tmp/acquire" "{\"ttl_ms\":$ttl_ms,\"wait_ms\":$wait_ms}")
case $code in
  201) ;;
  409)
    echo "with-lock: $resource is held by another owner (waited ${wait_ms}ms)" >&2
    exit 75
    ;;
  000)
    echo "with-lock: cannot reach the gateway at $url" >&2
    exit 69
    ;;
  4??)
    # 400 a bad value, 401 a missing or wrong API key, 404 a wrong URL, 413:
    # a configuration error that trying again cannot fix.
    echo "with-lock: the gateway refused the request (HTTP $code): $(field detail "$tmp/acquire")" >&2
    exit 64
    ;;
  *)
    echo "with-lock: gateway or quorum unavailable (HTTP $code): $(field detail "$tmp/acquire")" >&2
    exit 69
    ;;
esac
field token "$tmp/acquire" >"$tmp/token"
fence=$(field fencing_token "$tmp/acquire")
until=$((start + $(field validity_ms "$tmp/acquire")))
echo "$until" >"$tmp/until"
if [ $((until - $(now_ms))) -lt $((ttl_ms * 2 / 3)) ]; then
  # The validity counts from before the request, so a wait ate into it:
  # extend at once (an extension never waits) to know the window.
  deadline=$(($(now_ms) + ttl_ms / 3))
  if ! extend $((until > deadline ? until : deadline)); then
    echo "with-lock: $resource was lost right after it was acquired: $(cat "$tmp/reason")" >&2
    exit 75
  fi
fi

# The command runs in the background so that this shell can forward signals
# to it; its stdin is this script's (an asynchronous command would otherwise
# read /dev/null).
exec 3<&0
REDLOCKD_RESOURCE=$resource REDLOCKD_TOKEN=$(cat "$tmp/token") REDLOCKD_FENCING_TOKEN=$fence "$@" <&3 3<&- &
child=$!
exec 3<&-

# The keeper extends the lock every ttl/3. A 409 means the lock is lost; so
# does the end of the validity without a successful extension (503s or no
# answer). Then it marks the loss and sends SIGTERM to the command.
# Its sleep runs in the background so that the keeper's SIGTERM (from cleanup)
# ends it too: a sleep left behind would hold the script's stdout open, and
# whoever reads that output (out=$(with-lock.sh ...)) would wait for it.
(
  trap - EXIT
  sleeper=
  trap 'if [ -n "$sleeper" ]; then kill "$sleeper" 2>/dev/null; fi; exit 0' TERM
  while :; do
    sleep "$(seconds $((ttl_ms / 3)))" >/dev/null 2>&1 &
    sleeper=$!
    wait "$sleeper" || exit 0
    sleeper=
    extend "$(cat "$tmp/until")" && continue
    echo "with-lock: $resource lost: $(cat "$tmp/reason"); sending SIGTERM to the command" >&2
    : >"$tmp/lost"
    kill -TERM "$child" 2>/dev/null
    exit 0
  done
) &
keeper=$!

# wait returns early (above 128) when a trapped signal arrives: wait again
# until the command is gone.
while :; do
  wait "$child"
  status=$?
  kill -0 "$child" 2>/dev/null || break
done
exit "$status"
