"""The interface of an experiment tracker, and the run's set of them (`Trackers`).

A tracker (`Tracker`) is opened once per run before the first step with the job's manifest as
its config, gets each step's scalars, then the run report's plots, then is closed. A run
resumed from its checkpoint continues the tracker runs it logged to (`RunContext.recall`).
Each kind is one module (`tensorboard`, `wandb`, `mlflow`) imported only when a job names it,
so the trainer needs none of their packages unless a job asks for one.

What a step logs is read from the declaration (`dressage.api.figures`), never listed here: every
declared figure under its record key (`staleness/version_lag_mean`), a by-reason counter as its
total plus `<key>/<reason>`, a labelled gauge as `<key>/<label value>`; then the step record's
other numbers (what the trainer's step measured beyond the declaration), so a figure declared
later is tracked without a change here.

Failures follow `spec.tracking.onError`: a tracker that cannot start is a `TrackingError` (a
configuration error, before the first step), one that fails while logging a `TrackerFailed`,
each naming its field (`fail`); or a warning, and the run goes on without it (`warn`).
"""

from __future__ import annotations

import contextlib
import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from dressage.api.figures import FigureKind, StepFigures, figures_of
from dressage.api.job import AsyncRLJob
from dressage.api.loader import ConfigurationError

EXTRA = "tracking"
"""The package extra that installs every tracker's client."""
IDS_FILE = "tracking.json"
"""In the run directory: the W&B and MLflow run ids this run logs to, so that a run resumed
from its checkpoint goes on logging to the same tracker runs (`--fresh` deletes it with the
checkpoints)."""


class TrackingError(ConfigurationError):
    """A tracker could not start; the message names its field in `spec.tracking`."""


class TrackerFailed(RuntimeError):
    """A tracker failed while logging the run (`onError: fail`); the message names its
    field in `spec.tracking`."""


class Tracker(Protocol):
    """One experiment tracker's run."""

    def log_step(self, step: int, scalars: Mapping[str, float]) -> None:
        """Log one step's scalars (`step_scalars`)."""

    def log_plots(self, step: int, plots: Sequence[Path]) -> None:
        """Log the run report's PNG plots, as of the run's last step."""

    def close(self) -> None:
        """End the tracker's run and flush what it holds."""


@dataclass(frozen=True)
class RunContext:
    """What every tracker is opened with."""

    job: AsyncRLJob
    run_dir: Path
    """The run directory (`<workdir>/<job>/`), where file-based trackers write by default."""

    @property
    def name(self) -> str:
        return self.job.metadata.name

    @property
    def config(self) -> dict[str, Any]:
        """The run's config: the job's manifest as applied (camelCase, defaults included)."""
        return self.job.model_dump(mode="json", by_alias=True, exclude_none=True)

    @property
    def _ids_path(self) -> Path:
        return self.run_dir / IDS_FILE

    def recall(self, field: str) -> str | None:
        """The id of the tracker run an earlier invocation of this run logged to (None: none,
        or unreadable)."""
        try:
            ids = json.loads(self._ids_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        value = ids.get(field) if isinstance(ids, dict) else None
        return value if isinstance(value, str) else None

    def remember(self, field: str, run_id: str) -> None:
        """Keep the id of `field`'s tracker run beside the checkpoints, for `recall`."""
        try:
            ids = json.loads(self._ids_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            ids = {}
        ids = {**(ids if isinstance(ids, dict) else {}), field: run_id}
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._ids_path.write_text(json.dumps(ids, indent=2), encoding="utf-8")


_KINDS: dict[str, tuple[str, str]] = {
    "tensorboard": ("dressage.tracking.tensorboard", "tensorboard"),
    "wandb": ("dressage.tracking.wandb", "wandb"),
    "mlflow": ("dressage.tracking.mlflow", "mlflow-skinny"),
}
"""Each tracker's field of `spec.tracking`: its module and the package its client comes in."""


def requirement_error(field: str, package: str, exc: ImportError) -> TrackingError:
    """The error of a tracker whose client is not installed."""
    return TrackingError(
        f"spec.tracking.{field}: the {package} package is not installed ({exc}); install "
        f"Dressage with the {EXTRA!r} extra: pip install 'dressage[{EXTRA}]'"
    )


def step_scalars(figures: StepFigures, record: Mapping[str, Any] | None = None) -> dict[str, float]:
    """A step's numbers by name: every figure `figures` declares (unmeasured gauges left out),
    then each other number of the step record `record` (`StepRecord.to_dict`) but `step`."""
    out: dict[str, float] = {}
    for f in figures_of(type(figures)):
        value = getattr(figures, f.name)
        if value is None:
            continue
        if f.kind is FigureKind.BY_REASON:
            out[f.key] = figures.total(f.name)
            out.update({f"{f.key}/{reason}": float(n) for reason, n in dict(value).items()})
        elif f.label is not None:
            out.update({f"{f.key}/{label}": float(v) for label, v in dict(value).items()})
        else:  # as the step record writes it (seconds to the millisecond)
            out[f.key] = float(f.record_value(value))
    for key, value in (record or {}).items():
        if key == "step" or key in out or isinstance(value, bool):
            continue
        if isinstance(value, int | float):
            out[key] = float(value)
    return out


class Trackers:
    """The run's trackers, opened from `spec.tracking` by `open`; each call reaches every one,
    and a failure follows `onError`.

    The calls run in order on one thread of their own, never in the caller's: a tracker
    server that answers slowly (MLflow retries for minutes) must not stall the training
    loop's event loop, which also drives rollout. A step that failed to log under
    `onError: fail` raises at the next call (`log_step`, `flush`)."""

    def __init__(
        self, opened: Mapping[str, Tracker], *, on_error: str, warn: Callable[[str], None]
    ) -> None:
        self._trackers = dict(opened)
        self._fail = on_error == "fail"
        self._warn = warn
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trackers")
        self._failed: TrackerFailed | None = None
        """A failure to log under `onError: fail`, not raised yet."""

    @classmethod
    def open(cls, context: RunContext, *, warn: Callable[[str], None] = print) -> Trackers:
        """Open every tracker `spec.tracking` names; one that cannot start raises a
        `TrackingError` (`onError: fail`, the others opened so far are closed first) or is
        left out with a warning (`warn`)."""
        spec = context.job.spec.tracking
        trackers = cls({}, on_error=spec.on_error, warn=warn)
        for field, (module_name, package) in _KINDS.items():
            settings = getattr(spec, field)
            if settings is None:
                continue
            try:
                module = importlib.import_module(module_name)
                trackers._trackers[field] = module.open_tracker(settings, context)
            except Exception as exc:
                error = _as_tracking_error(field, package, exc)
                if trackers._fail:
                    trackers.close()
                    raise error from exc
                warn(f"warning: {error}; the run goes on without it (onError: warn)")
        return trackers

    @property
    def names(self) -> list[str]:
        """The fields of the trackers logging this run."""
        return list(self._trackers)

    def log_step(self, figures: StepFigures, record: Mapping[str, Any]) -> None:
        """Log one step: its figures and the other numbers of its record (in the background;
        raises `TrackerFailed` for an earlier step that failed under `onError: fail`)."""
        self._raise_failed()
        step = int(record["step"])
        scalars = step_scalars(figures, record)
        self._worker.submit(self._each, "log a step", lambda t: t.log_step(step, scalars))

    def log_evaluation(self, step: int, scalars: Mapping[str, float]) -> None:
        """Log a held-out evaluation's figures (`eval/pass@1`, ...) at the step that made its
        version, as each tracker logs a step's scalars."""
        self._raise_failed()
        figures = dict(scalars)
        self._worker.submit(self._each, "log an evaluation", lambda t: t.log_step(step, figures))

    def log_plots(self, step: int, plots: Sequence[Path]) -> None:
        """Log the run report's plots (those that exist). The run has trained by then: a
        tracker that fails here is a warning whatever `onError` says."""
        present = [p for p in plots if p.is_file()]
        if present:
            plotted = partial(_log_plots, step=step, plots=present)
            self._worker.submit(self._each, "log the plots", plotted, fail=False)

    def flush(self) -> None:
        """Wait for every call so far; raise `TrackerFailed` for one that failed under
        `onError: fail`."""
        self._worker.submit(lambda: None).result()
        self._raise_failed()

    def close(self) -> None:
        """Finish the calls so far, then close every tracker (each once; a failure to close,
        or to log a last step, is a warning)."""
        self._worker.submit(self._close_all).result()
        self._worker.shutdown()
        if self._failed is not None:
            self._warn(f"warning: {self._failed}")
            self._failed = None

    def _raise_failed(self) -> None:
        failed, self._failed = self._failed, None
        if failed is not None:
            raise failed

    def _close_all(self) -> None:
        trackers, self._trackers = self._trackers, {}
        for field, tracker in trackers.items():
            try:
                tracker.close()
            except Exception as exc:
                self._warn(f"warning: spec.tracking.{field}: could not close its run: {exc}")

    def _each(self, what: str, call: Callable[[Tracker], None], *, fail: bool = True) -> None:
        """`call` on every tracker (on the worker); one that fails is closed and left out of
        the rest of the run, and its error kept for the caller (`onError: fail`) or warned."""
        for field, tracker in list(self._trackers.items()):
            try:
                call(tracker)
            except Exception as exc:
                error = TrackerFailed(f"spec.tracking.{field}: could not {what}: {exc}")
                error.__cause__ = exc
                self._trackers.pop(field, None)
                with contextlib.suppress(Exception):  # failing already: the error says why
                    tracker.close()
                if fail and self._fail:
                    self._failed = self._failed or error
                else:
                    self._warn(f"warning: {error}; the run goes on without it (onError: warn)")


def _log_plots(tracker: Tracker, *, step: int, plots: Sequence[Path]) -> None:
    tracker.log_plots(step, plots)


def _as_tracking_error(field: str, package: str, exc: Exception) -> TrackingError:
    if isinstance(exc, TrackingError):
        return exc
    if isinstance(exc, ImportError):
        return requirement_error(field, package, exc)
    return TrackingError(f"spec.tracking.{field}: could not start: {type(exc).__name__}: {exc}")
