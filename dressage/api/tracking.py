"""The job's experiment trackers (`spec.tracking`): TensorBoard, Weights & Biases, MLflow.

Any of the three, several at once. Each gets every declared step figure per step, the job's
manifest as the run's config, and the plots of the run report at the end
(`dressage.tracking`). The trackers' packages are not part of the trainer's install: a job
that names one needs the `tracking` extra (`pip install 'dressage[tracking]'`; on a cluster,
`code.packages` or an image built from the runtime image).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dressage.api.base import ApiModel

TrackingOnError = Literal["fail", "warn"]


class TensorBoardSpec(ApiModel):
    """TensorBoard event files."""

    log_dir: str | None = Field(default=None, min_length=1)
    """Directory of the event files: absolute, or relative to the run directory
    (`<local.workdir>/<job>/` under `dressage run`, `<storage.mountPath>/<job>/` on a
    cluster). Unset: `tensorboard/` in the run directory."""


class WandbSpec(ApiModel):
    """A Weights & Biases run. Online mode needs an API key: `WANDB_API_KEY` in the trainer's
    environment (on a cluster, `trainer.template.env` from a Secret)."""

    project: str = Field(min_length=1)
    """The W&B project."""
    entity: str | None = Field(default=None, min_length=1)
    """The W&B team or user (unset: the key's default entity)."""
    mode: Literal["online", "offline"] = "online"
    """`online` streams to the W&B server; `offline` writes the run under `wandb/` in the run
    directory, for `wandb sync` later."""
    name: str | None = Field(default=None, min_length=1)
    """The run's display name (unset: the job's name)."""
    tags: list[str] = Field(default_factory=list)
    """The run's tags."""


class MlflowSpec(ApiModel):
    """An MLflow run: the step figures as metrics, the manifest as parameters, the plots as
    artifacts."""

    tracking_uri: str | None = Field(default=None, min_length=1)
    """The tracking server (`http://mlflow:5000`) or store (a `file:` directory; a
    `sqlite:` database needs the full `mlflow` package). Unset: `MLFLOW_TRACKING_URI` in the
    trainer's environment, else MLflow's default."""
    experiment_name: str | None = Field(default=None, min_length=1)
    """The experiment, created when missing (unset: the job's name)."""
    run_name: str | None = Field(default=None, min_length=1)
    """The run's name (unset: the job's name)."""


class TrackingSpec(ApiModel):
    """Experiment trackers the trainer logs the run to (rank 0 only)."""

    tensorboard: TensorBoardSpec | None = None
    """Write TensorBoard event files."""
    wandb: WandbSpec | None = None
    """Log to Weights & Biases."""
    mlflow: MlflowSpec | None = None
    """Log to MLflow."""
    on_error: TrackingOnError = "fail"
    """What a tracker that cannot start (no API key, no server, its package not installed)
    or fails while logging does: `fail` stops the run with an error naming the tracker's
    field, before the first step when it cannot start; `warn` prints a warning and the run
    goes on without that tracker."""
