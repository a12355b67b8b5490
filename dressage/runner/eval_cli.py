"""`dressage eval JOB.yaml [--version vN | --weights DIR] [--proxy URL] [--workdir DIR]
[--prompts N] [--out FILE]`: evaluate a job's weights without training.

What is evaluated: the job's starting model (its `spec.model`, warm-started when the job
says so), a version the job published (`--version vN`: `<workdir>/<job>/weights/vN`), or any
Hugging Face checkpoint directory (`--weights DIR`). Where: on an embedded engine and a proxy
started here (CPU, or `--device`), or against a running job's proxy (`--proxy URL`), whose
engines serve the version it evaluates. How: the job's `spec.evaluation` (its defaults when the
job has none), through the job's own agent, with the same guarantee as during training: every
counted token is the evaluated version's. The figures go to stdout (the `eval ...` line) and to
a JSON file (`--out`, default `<workdir>/<job>/eval-<version>.json`).

Bad input is a one-line error naming it (exit 2): no such version, a directory that holds no
checkpoint, a dataset without the prompt column, an unreachable proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dressage.api.job import AsyncRLJob
from dressage.api.loader import load_job

if TYPE_CHECKING:
    from dressage.evaluation.figures import Evaluation
    from dressage.proxy.client import ProxyRolloutClient
    from dressage.proxy.engine_set import EngineSet
    from dressage.runner.processes import ChildProcess

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
STARTUP_DEADLINE_S = 300.0
ENGINES_DEADLINE_S = 60.0
"""How long the engine this command started may take to pass the proxy's health check."""
ENGINES_POLL_S = 0.25


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n")[1] if __doc__ else None
    parser.add_argument("manifest", help="AsyncRLJob YAML file")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--version", default=None, help="a version the job published (vN; v0 is its start)"
    )
    which.add_argument(
        "--weights", type=Path, default=None, help="a Hugging Face checkpoint directory"
    )
    parser.add_argument(
        "--proxy",
        default=None,
        metavar="URL",
        help="evaluate through a running job's proxy (the version its engines serve)",
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, help="override spec.local.workdir (run dir parent)"
    )
    parser.add_argument(
        "--prompts", type=int, default=None, help="override spec.evaluation.prompts"
    )
    parser.add_argument("--out", type=Path, default=None, help="the JSON file of the figures")
    parser.add_argument("--device", default="cpu", help="torch device of the embedded engine")


class BadInput(ValueError):
    """Input `dressage eval` cannot evaluate (one line, naming it)."""


@dataclass(frozen=True)
class Target:
    """What to evaluate: the weights' directory (None: whatever the proxy serves) and the
    version label they are served under, with the step that made it."""

    model_dir: Path | None
    version: str
    step: int


def version_step(version: str) -> int:
    """The step whose publish made version `vN` (N); 0 for any other label."""
    return int(version[1:]) if version[:1] == "v" and version[1:].isdigit() else 0


def resolve_target(args: argparse.Namespace, run_root: Path) -> Target | None:
    """The weights `--version` or `--weights` name (None: the job's starting model), or a
    `BadInput` naming what is missing."""
    if args.weights is not None:
        if not (args.weights / "config.json").is_file():
            raise BadInput(
                f"--weights {args.weights}: no Hugging Face checkpoint there (no config.json)"
            )
        return Target(args.weights, args.weights.name or "weights", 0)
    if args.version is None or args.version == "v0" or args.proxy is not None:
        return None
    weights = run_root / "weights"
    path = weights / args.version
    if not (path / "config.json").is_file():
        have = sorted(p.name for p in weights.iterdir() if p.is_dir()) if weights.is_dir() else []
        listed = ", ".join(have) if have else "none"
        raise BadInput(
            f"--version {args.version}: no published version {args.version} in {weights} "
            f"(published and kept: {listed})"
        )
    return Target(path, args.version, version_step(args.version))


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # An unreachable proxy is this command's one-line error, not also the client's warning.
    logging.getLogger("dressage.proxy.client").setLevel(logging.ERROR)
    try:
        job = load_job(args.manifest)
        if args.prompts is not None:
            if args.prompts < 1:
                raise BadInput(f"--prompts must be >= 1, got {args.prompts}")
            from dressage.orchestrator.evaluations import evaluation_of

            evaluation = evaluation_of(job.spec).model_copy(update={"prompts": args.prompts})
            job.spec.evaluation = evaluation
        from dressage.tasks.usercode import add_job_dir

        add_job_dir(args.manifest)
        workdir = args.workdir if args.workdir is not None else Path(job.spec.local.workdir)
        run_root = workdir / job.metadata.name
        target = resolve_target(args, run_root)
        from dressage.orchestrator.evaluations import evaluation_task

        task = evaluation_task(job.spec)  # a dataset without its prompt column fails here
    except (OSError, ValueError) as exc:
        print(f"dressage eval: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        result = asyncio.run(_evaluate(job, args, target, run_root, task))
    except BadInput as exc:
        print(f"dressage eval: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:
        print(f"dressage eval: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(result.line(), flush=True)
    out = args.out or run_root / f"eval-{result.version}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result.to_dict(), indent=2), encoding="utf-8")
    print(f"figures: {out}", flush=True)
    return 0


async def _evaluate(
    job: AsyncRLJob, args: argparse.Namespace, target: Target | None, run_root: Path, task: object
) -> Evaluation:
    from dressage.model import default_cache_dir
    from dressage.model.warmstart import initial_model_dir
    from dressage.orchestrator.evaluations import build_evaluator
    from dressage.proxy.client import ProxyRolloutClient
    from dressage.tasks.codec import PromptCodec
    from dressage.tasks.faults import UserCodeFaults

    spec = job.spec
    cache_dir = Path(spec.local.cache_dir) if spec.local.cache_dir else default_cache_dir()
    start = await asyncio.to_thread(initial_model_dir, spec, cache_dir, log=lambda _: None)
    model_dir = start if target is None or target.model_dir is None else target.model_dir
    codec = PromptCodec.from_pretrained(model_dir)
    children: list[ChildProcess] = []
    try:
        if args.proxy is not None:
            proxy_url = args.proxy
        else:
            version = "v0" if target is None else target.version
            proxy_url = await _start_local(job, args, model_dir, version, run_root, children)
        proxy = ProxyRolloutClient(proxy_url)
        try:
            # Engines this command started may still be on their way into the proxy's health
            # checks (a loaded machine answers a first probe slowly); a running job's are not.
            wait_s = ENGINES_DEADLINE_S if args.proxy is None else 0.0
            version = await serving_version(proxy, proxy_url, wait_s)
            if args.version is not None and version != args.version:
                raise BadInput(f"--version {args.version}: the proxy's engines serve {version}")
            evaluator = build_evaluator(
                job,
                proxy=proxy,
                codec=codec,
                faults=UserCodeFaults(),
                task=task,  # type: ignore[arg-type]
            )
            return await evaluator.evaluate(version, version_step(version))
        finally:
            await proxy.aclose()
    finally:
        from dressage.runner.processes import stop_together

        stop_together(children)


def version_served(engine_set: EngineSet) -> str | None:
    """The version a proxy's engines serve: the one the proxy routes to, or, when it was never
    told one, its healthy engines' own when they agree; None when there is no such version."""
    served = {e.weight_version for e in engine_set.engines if e.healthy}
    return engine_set.weight_version or (served.pop() if len(served) == 1 else None)


async def serving_version(
    proxy: ProxyRolloutClient,
    proxy_url: str,
    wait_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> str:
    """The version `proxy`'s engines serve (`version_served`), asked again every
    `ENGINES_POLL_S` for up to `wait_s` seconds while there is none (0: asked once). Raises
    `BadInput` naming the proxy when it cannot be reached or serves no single version, with
    the engines' versions, or why the proxy finds them down."""
    from dressage.proxy.client import RolloutError

    deadline = clock() + wait_s
    while True:
        try:
            engine_set = await proxy.engines()
        except RolloutError as exc:
            raise BadInput(f"--proxy {proxy_url}: unreachable ({exc})") from None
        version = version_served(engine_set)
        if version is not None:
            return version
        if clock() >= deadline:
            break
        await sleep(ENGINES_POLL_S)
    healthy = sorted(str(e.weight_version) for e in engine_set.engines if e.healthy)
    down = [f"{e.url}: {e.last_error or 'down'}" for e in engine_set.engines if not e.healthy]
    waited = f" after {wait_s:.0f} s" if wait_s else ""
    raise BadInput(
        f"--proxy {proxy_url}: its engines serve no single version{waited} "
        f"({', '.join(healthy) or 'none healthy'}{''.join(f'; {d}' for d in down)})"
    )


async def _start_local(
    job: AsyncRLJob,
    args: argparse.Namespace,
    model_dir: Path,
    version: str,
    run_root: Path,
    children: list[ChildProcess],
) -> str:
    """One embedded engine serving `model_dir` as `version`, and a proxy in front of it (both
    added to `children` as they start); the proxy's URL."""
    from dressage.engine.embedded.release_profiles import stand_in_release
    from dressage.runner.fleet import ENGINE_READY
    from dressage.runner.local import PROXY_READY
    from dressage.runner.processes import ChildProcess, python_module

    spec = job.spec
    logs = run_root / "logs"
    engine_argv = python_module(
        "engine", "serve", "--host", "127.0.0.1", "--port", "0",
        "--model", str(model_dir),
        "--weight-version", version,
        "--seed", str(spec.training.seed),
        "--threads", str(spec.local.engine_threads),
        "--max-batch-size", str(spec.local.engine_max_batch_size),
        "--device", args.device,
        "--sglang-release", stand_in_release(spec.inference.sglang_version),
    )  # fmt: skip
    engine = ChildProcess("eval-engine", engine_argv, log_path=logs / "eval-engine.log")
    children.append(engine)
    engine.start()
    engine_url = await engine.wait_for(ENGINE_READY, STARTUP_DEADLINE_S)
    proxy_argv = python_module(
        "proxy", "--config", str(args.manifest),
        "--engine-urls", engine_url,
        "--host", "127.0.0.1", "--port", "0",
        "--model", str(model_dir),
    )  # fmt: skip
    proxy = ChildProcess("eval-proxy", proxy_argv, log_path=logs / "eval-proxy.log")
    children.append(proxy)
    proxy.start()
    return await proxy.wait_for(PROXY_READY, STARTUP_DEADLINE_S)

