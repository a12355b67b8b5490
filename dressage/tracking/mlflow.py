"""MLflow: one MLflow run per run directory, through `MlflowClient` (no process-wide active
run); a run resumed from its checkpoint logs on to the same MLflow run.

The manifest is the run's parameters (one per field, dotted: `spec.rollout.groupSize`) and
the artifact `job.yaml`; each step's scalars are metrics at that step; each plot of the run
report an artifact under `plots/`. The experiment (`experimentName`, else the job's name) is
created when missing. Works with the `mlflow-skinny` client: a tracking server, or a `file:`
store (MLflow 3 refuses file stores unless `MLFLOW_ALLOW_FILE_STORE=true`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from dressage.api.tracking import MlflowSpec
from dressage.tracking.base import RunContext, requirement_error

PARAM_VALUE_LIMIT = 6000
"""Characters MLflow keeps of a parameter's value."""
BATCH = 100
"""Parameters per `log_batch` call (MLflow's limit; metrics allow 1000)."""
_UNSAFE = re.compile(r"[^\w\-. /]")
"""Characters MLflow refuses in a metric or parameter name."""


def flatten(config: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """`(dotted.name, value)` for every leaf of `config`; lists are JSON."""
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from flatten(value, f"{name}.")
        else:
            text = value if isinstance(value, str) else json.dumps(value)
            yield _UNSAFE.sub("_", name), text[:PARAM_VALUE_LIMIT]


def mlflow_names(scalars: Mapping[str, float]) -> dict[str, float]:
    """A step's numbers under the names MLflow logs them by: characters it refuses replaced,
    and a number whose name is also the group of others (a counter's total beside its
    `<key>/<reason>` parts) as `<key>/total`. MLflow's file store keeps each metric in a file
    at its name's path, so `<key>` and `<key>/<reason>` cannot both be files: the batch would
    fail from the first clash on."""
    safe = {_UNSAFE.sub("_", k): v for k, v in scalars.items()}
    groups = {name.rsplit("/", i)[0] for name in safe for i in range(1, name.count("/") + 1)}
    return {(f"{name}/total" if name in groups else name): v for name, v in safe.items()}


class MlflowTracker:
    """One MLflow run."""

    def __init__(self, settings: MlflowSpec, context: RunContext) -> None:
        try:
            from mlflow.entities import Param
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise requirement_error("mlflow", "mlflow-skinny", exc) from exc
        self.client = MlflowClient(tracking_uri=settings.tracking_uri)
        name = settings.experiment_name or context.name
        experiment = self.client.get_experiment_by_name(name)
        experiment_id = (
            experiment.experiment_id if experiment else self.client.create_experiment(name)
        )
        earlier = self._earlier_run(context.recall("mlflow"), experiment_id)
        if earlier is not None:
            # A run resumed from its checkpoint: its MLflow run goes on. Its parameters stay
            # those it started with (MLflow refuses to change one); `job.yaml` is replaced.
            self.run_id: str = earlier
            self.client.update_run(earlier, status="RUNNING")
        else:
            run = self.client.create_run(
                experiment_id,
                run_name=settings.run_name or context.name,
                tags={"dressage.job": context.name},
            )
            self.run_id = run.info.run_id
            context.remember("mlflow", self.run_id)
            params = [Param(k, v) for k, v in flatten(context.config)]
            for start in range(0, len(params), BATCH):
                self.client.log_batch(self.run_id, params=params[start : start + BATCH])
        self.client.log_text(
            self.run_id, yaml.safe_dump(context.config, sort_keys=False), "job.yaml"
        )

    def _earlier_run(self, run_id: str | None, experiment_id: str) -> str | None:
        """`run_id` when it names a run of the experiment on this server, else None."""
        if run_id is None:
            return None
        try:
            run = self.client.get_run(run_id)
        except Exception:  # deleted, or another server: a new run
            return None
        if run.info.experiment_id != experiment_id or run.info.lifecycle_stage != "active":
            return None
        return run_id

    def log_step(self, step: int, scalars: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        named = mlflow_names(scalars)
        metrics = [Metric(name, v, now, step) for name, v in named.items()]
        for start in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[start : start + 1000])

    def log_plots(self, step: int, plots: Sequence[Path]) -> None:
        for plot in plots:
            self.client.log_artifact(self.run_id, str(plot), artifact_path="plots")

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def open_tracker(settings: MlflowSpec, context: RunContext) -> MlflowTracker:
    return MlflowTracker(settings, context)
