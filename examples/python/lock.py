#!/usr/bin/env python3
"""Hold a redlockd lock from Python with the redlockd_client package.

    from redlockd_client import Client

    with Client(url, api_key=key).lock("nightly-report", ttl=30, wait=10) as held:
        for row in rows:
            held.check()                                  # raises LockLostError once the lock is lost
            db.write(row, fence=held.fencing_token)       # the storage rejects stale fences

Install the package with `pip install ./clients/python`; run from a checkout,
this file finds it there. As a program it is a small demo (see --help): it
uses $REDLOCKD_URL and sends $REDLOCKD_API_KEY as a bearer key and, like
`redlockd run`, exits 75 when the lock is held by another owner, 69 when the
gateway or a quorum is unavailable, 76 when the lock was lost during the work,
64 when the gateway refused the request or the API key (a configuration
error: trying again cannot help).
"""

import argparse
import os
import socket
import sys
import time

try:
    import redlockd_client
except ImportError:  # not installed: use the package of this checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python", "src"))
    import redlockd_client

EXIT_USAGE, EXIT_UNAVAILABLE, EXIT_HELD, EXIT_LOST = 64, 69, 75, 76


def milliseconds(text):
    """A flag's value: whole milliseconds, 0 or more."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"want whole milliseconds, not {text!r}")
    return int(text)


def main(argv=None):
    p = argparse.ArgumentParser(description="Demo: hold a redlockd lock while doing some work.")
    p.add_argument("resource")
    p.add_argument("--ttl-ms", type=milliseconds, default=30_000)
    p.add_argument("--wait-ms", type=milliseconds, default=0, help="how long to wait for the lock (default 0: fail at once)")
    p.add_argument("--work-ms", type=milliseconds, default=1_000, help="how long the work takes")
    p.add_argument("--journal", help="file to append 'enter ID FENCE' and 'exit ID' lines to")
    try:
        args = p.parse_args(argv)
    except SystemExit as e:  # argparse exits 2 on a usage error; 64 is the convention here
        return EXIT_USAGE if e.code == 2 else e.code
    me = f"python-{os.getpid()}"

    def journal(line):
        if args.journal:
            with open(args.journal, "a") as f:
                f.write(line + "\n")

    client = redlockd_client.Client(os.environ.get("REDLOCKD_URL") or "http://127.0.0.1:8080",
                                    api_key=os.environ.get("REDLOCKD_API_KEY"))
    try:
        with client.lock(args.resource, ttl=args.ttl_ms / 1000, wait=args.wait_ms / 1000,
                         owner=f"{socket.gethostname()}:{me}") as held:
            journal(f"enter {me} {held.fencing_token}")
            print(f"lock: holding {args.resource} with fencing token {held.fencing_token}", flush=True)
            end = time.monotonic() + args.work_ms / 1000
            while time.monotonic() < end:  # the work, in steps that each check the lock
                held.check()
                time.sleep(min(0.05, max(end - time.monotonic(), 0)))
            held.check()
            journal(f"exit {me}")
    except redlockd_client.LockHeldError as e:
        print(f"lock: {e}", file=sys.stderr)
        return EXIT_HELD
    except redlockd_client.UnavailableError as e:
        print(f"lock: {e}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except redlockd_client.ConfigError as e:
        print(f"lock: {e}", file=sys.stderr)
        return EXIT_USAGE
    except redlockd_client.LockLostError as e:
        print(f"lock: lost: {e}", file=sys.stderr)
        return EXIT_LOST
    print(f"lock: released {args.resource}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
