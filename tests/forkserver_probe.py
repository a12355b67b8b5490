"""`python -m tests.forkserver_probe [child] [wait] [exit N]`: prints what it runs with (argv,
working directory, `PROBE` from the environment, whether stdin is empty, its pid, session,
process group and cores, and with `child` the pid of a `sleep` it started) as one JSON line,
then pauses until a signal (`wait`) or exits with N. The fork server's tests run it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

if __name__ == "__main__":
    args = sys.argv[1:]
    child = subprocess.Popen(["sleep", "600"]) if "child" in args else None
    print(
        json.dumps(
            {
                "argv": sys.argv,
                "cwd": os.getcwd(),
                "probe": os.environ.get("PROBE"),
                "env_keys": sorted(os.environ),
                "stdin": sys.stdin.read(),
                "pid": os.getpid(),
                "sid": os.getsid(0),
                "pgid": os.getpgrp(),
                "cpus": sorted(os.sched_getaffinity(0)),
                "child": None if child is None else child.pid,
            }
        ),
        flush=True,
    )
    print("to stderr", file=sys.stderr, flush=True)
    if "wait" in args:
        signal.pause()
    raise SystemExit(int(args[args.index("exit") + 1]) if "exit" in args else 0)
