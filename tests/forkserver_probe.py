"""`python -m tests.forkserver_probe [child] [linger] [wait] [exit N]`: prints what it runs
with (argv, working directory, `PROBE` from the environment, whether stdin is empty, its pid,
session, process group and cores, the head of its `sys.path`, and with `child` the pid of a
`sleep` it started) as one JSON line, then "to stderr" on its standard error, then pauses
until a signal (`wait`) or exits with N; with `linger` it leaves a thread running that prints
"thread done", and an exit hook that prints "atexit ran". The fork server's tests run it."""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import threading
import time

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
                "path": sys.path[:3],
            }
        ),
        flush=True,
    )
    print("to stderr", file=sys.stderr, flush=True)
    if "linger" in args:  # a non-daemon thread still running, and an exit hook
        atexit.register(print, "atexit ran", flush=True)
        threading.Thread(target=lambda: (time.sleep(0.2), print("thread done", flush=True))).start()
    if "wait" in args:
        signal.pause()
    raise SystemExit(int(args[args.index("exit") + 1]) if "exit" in args else 0)
