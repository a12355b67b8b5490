"""`python -m tests.forkserver_probe [wait] [exit N]`: prints what it runs with (argv, working
directory, `PROBE` from the environment, whether stdin is empty) as one JSON line, then pauses
until a signal (`wait`) or exits with N. The fork server's tests run it."""

from __future__ import annotations

import json
import os
import signal
import sys

if __name__ == "__main__":
    args = sys.argv[1:]
    print(
        json.dumps(
            {
                "argv": sys.argv,
                "cwd": os.getcwd(),
                "probe": os.environ.get("PROBE"),
                "env_keys": sorted(os.environ),
                "stdin": sys.stdin.read(),
            }
        ),
        flush=True,
    )
    print("to stderr", file=sys.stderr, flush=True)
    if "wait" in args:
        signal.pause()
    raise SystemExit(int(args[args.index("exit") + 1]) if "exit" in args else 0)
