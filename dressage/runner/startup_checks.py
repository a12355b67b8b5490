"""What `dressage run` checks before it builds a model or starts an engine.

The job's own settings for this machine (`--steps`, the cores in `spec.local`), its task
(`dressage.tasks.task_checks`: the dataset read and checked, the environment built, the reward
dry-called), then the `--device`, the one check that imports torch. Each problem is a
`ConfigurationError` naming the field or flag, which `dressage run` reports with exit code 2,
nothing started and no report written.
"""

from __future__ import annotations

from dressage.api.job import AsyncRLJob
from dressage.api.loader import ConfigurationError
from dressage.runner.processes import available_cpus
from dressage.tasks.task_checks import Preflight, preflight


def check_local_run(job: AsyncRLJob, *, steps: int | None, device: str) -> Preflight:
    """Check `job` for a local run of `steps` steps (None: the job's) on `device`."""
    if steps is not None and steps < 1:
        raise ConfigurationError("--steps must be at least 1")
    local = job.spec.local
    check_cpus(local.engine_cpus, "spec.local.engineCpus")
    check_cpus(local.trainer_cpus, "spec.local.trainerCpus")
    check_cpus(local.rollout_cpus, "spec.local.rolloutCpus")
    checked = preflight(job.spec.task)
    # Last: it imports torch (about 3 CPU-seconds), which none of the checks above needs, so
    # a mistake in the job's task or data is reported without that wait.
    from dressage.engine.embedded.cli import device_problem

    problem = device_problem(device)
    if problem is not None:
        raise ConfigurationError(f"--device: {problem}")
    return checked


def check_cpus(cpus: list[int] | None, field: str) -> None:
    """Refuse cores this machine does not let the run use, naming the job's field."""
    if cpus is None:
        return
    unknown = sorted(set(cpus) - set(available_cpus()))
    if unknown:
        raise ConfigurationError(
            f"{field}: cores {unknown} are not available (usable: {available_cpus()})"
        )
