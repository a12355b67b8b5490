"""Experiment trackers: the run logged to TensorBoard, Weights & Biases and MLflow
(`spec.tracking`).

`base` holds the interface (`Tracker`), what a step logs (`step_scalars`) and the run's set of
trackers (`Trackers`); one module per tracker (`tensorboard`, `wandb`, `mlflow`), each with an
`open_tracker(settings, context)` that imports its client only when a job names it.
"""

from dressage.tracking.base import RunContext, TrackerFailed, Trackers, TrackingError

__all__ = ["RunContext", "TrackerFailed", "Trackers", "TrackingError"]
