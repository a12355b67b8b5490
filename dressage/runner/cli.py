"""`dressage run JOB.yaml [--steps N] [--workdir DIR] [--fresh] [--metrics-port P] [--device D]
[--churn SCHEDULE]`.

Runs an AsyncRLJob locally: engines, proxy and trainer as local processes, progress on stdout,
Prometheus `/metrics`, and a report in `<workdir>/<job>/`. Rerunning the same command resumes
from the last checkpoint; `--fresh` starts over. Ctrl-C (or SIGTERM) stops every child process
and still writes the report of the steps done. `--device cuda` runs the trainer and the
embedded engines on the GPU (default: CPU). `--churn kill@3,add@4,drain@7` kills, adds and
drains engines while the run trains (`dressage.runner.churn`), as a cluster's fleet changes.

Exit codes: 0 done, 1 the run failed (a child process, rollout, the job's own code, or a run
in which no trained sample got a real reward because every reward call failed: a warning would
scroll by while the exit code reaches scripts and CI), 2 the job's
configuration cannot work (`ConfigurationError`: found by the pre-flight checks before anything
starts, `dressage.runner.startup_checks`, or later; either way no report is written), 130
interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dressage.api.loader import ConfigurationError, load_job
from dressage.api.sglang import untested_release_message

if TYPE_CHECKING:
    from dressage.runner.local import LocalRun

EXIT_FAILED = 1
EXIT_CONFIGURATION = 2
EXIT_INTERRUPTED = 130


DESCRIPTION = """\
Train an AsyncRLJob locally: its engines, proxy and trainer run as local processes, progress
goes to stdout, Prometheus metrics to /metrics, and the report (report.json and plots) to
WORKDIR/JOB_NAME/ (WORKDIR: spec.local.workdir or --workdir). Check a manifest first with
`dressage validate JOB.yaml`.

A rerun of the same command resumes after the last checkpoint (every
spec.training.checkpointEvery steps): the weights, the optimizer and the data position come
back and training goes on to the job's last step. A run that has done all its steps does
nothing; `--steps N` with a larger N trains on up to step N, and `--fresh` deletes the run
directory and starts over from step 1.\
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("manifest", help="AsyncRLJob YAML file")
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="train up to this step instead of spec.training.steps (a larger N continues a "
        "finished run)",
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="override spec.local.workdir (run dir parent)"
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="delete the job's run directory (checkpoints, history, report) and start over from "
        "step 1 instead of resuming",
    )
    parser.add_argument(
        "--metrics-port", type=int, default=None, help="override spec.local.metricsPort (0: free)"
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="torch device of the trainer and the embedded engines: cpu (default), cuda, cuda:N",
    )
    parser.add_argument(
        "--churn",
        default="",
        metavar="SCHEDULE",
        help="change the engines while the run trains: comma-separated ACTION@STEP[:ENGINE], "
        "ACTION kill (SIGKILL), add or drain (the proxy's drain, then stop), after step STEP; "
        "engines are engine-0, engine-1, ... in start order (kill and drain take the oldest "
        "unless named); what each change did goes to <run dir>/churn.json",
    )


def run(args: argparse.Namespace) -> int:
    # Unexpected failures inside an agent are logged with their traceback (and counted as
    # `rollout_error`): they must reach the run's output.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        job = load_job(args.manifest)
        untested = untested_release_message(job.spec.inference.sglang_version)
        if untested is not None:
            # Once per run, not per engine: the embedded engine is not SGLang, but the
            # manifest is meant for a cluster whose engines run this release.
            print(f"warning: spec.inference.sglangVersion: {untested}", file=sys.stderr)
        from dressage.runner.startup_checks import check_local_run
        from dressage.tasks.usercode import add_job_dir

        # A job's own reward, environment and data sit beside its manifest or in the
        # working directory.
        add_job_dir(args.manifest)
        checked = check_local_run(job, steps=args.steps, device=args.device)
        from dressage.runner.churn import plan_churn

        steps = args.steps if args.steps is not None else job.spec.training.steps
        churn = plan_churn(args.churn, replicas=job.spec.inference.replicas, steps=steps)
    except (OSError, ValueError) as exc:  # a ConfigurationError is a ValueError
        print(exc, file=sys.stderr)
        return EXIT_CONFIGURATION
    print(f"checked before starting: {'; '.join(checked.notes) or 'the task'}", flush=True)
    from dressage.runner.local import LocalRun, LocalRunOptions

    options = LocalRunOptions(
        manifest=Path(args.manifest),
        workdir=args.workdir if args.workdir is not None else Path(job.spec.local.workdir),
        steps=steps,
        fresh=args.fresh,
        metrics_port=args.metrics_port,
        device=args.device,
        churn=churn,
    )
    local = LocalRun(job, options, out=lambda line: print(line, flush=True), task=checked.task)
    return asyncio.run(_main(local))


async def _main(local: LocalRun) -> int:
    from dressage.engine.errors import EngineError
    from dressage.orchestrator.rollout_process import RolloutProcessFailed
    from dressage.proxy.client import RolloutError
    from dressage.rollout.retry import RolloutBroken
    from dressage.runner.local import NoRealReward
    from dressage.runner.processes import ChildFailed
    from dressage.tracking import TrackerFailed

    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    report = True
    try:
        await local.run()
        return 0
    except asyncio.CancelledError:
        local.out("interrupted: stopping child processes")
        return EXIT_INTERRUPTED
    except ConfigurationError as exc:
        print(f"dressage run: {exc}", file=sys.stderr, flush=True)
        report = False
        return EXIT_CONFIGURATION
    except (
        ChildFailed,
        RolloutError,
        RolloutBroken,
        RolloutProcessFailed,
        EngineError,
        NoRealReward,
        TrackerFailed,
        ValueError,
    ) as exc:
        print(f"dressage run: {exc}", file=sys.stderr, flush=True)
        return EXIT_FAILED
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        local.shutdown(report=report)
