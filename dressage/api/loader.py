"""Reading and validating job manifests, with errors that name the field at fault."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dressage.api.job import AsyncRLJob


class JobValidationError(ValueError):
    """A job manifest is invalid. `errors` holds one `(field path, message)` per problem."""

    def __init__(self, source: str, errors: list[tuple[str, str]]) -> None:
        self.source = source
        self.errors = errors
        lines = "\n".join(f"  {path}: {message}" for path, message in errors)
        super().__init__(f"invalid AsyncRLJob in {source}:\n{lines}")


def _field_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "<root>"


def validate_job(obj: Mapping[str, Any], source: str = "<manifest>") -> AsyncRLJob:
    """Validate a manifest dict into an `AsyncRLJob`, raising `JobValidationError`."""
    if not isinstance(obj, Mapping):
        raise JobValidationError(source, [("<root>", "a manifest must be a mapping")])
    try:
        return AsyncRLJob.model_validate(dict(obj))
    except ValidationError as exc:
        errors = [(_field_path(tuple(e["loc"])), e["msg"]) for e in exc.errors()]
        raise JobValidationError(source, errors) from None


def load_job(path: str | Path) -> AsyncRLJob:
    """Load the first `AsyncRLJob` document from a YAML file."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise JobValidationError(str(path), [("<yaml>", str(exc))]) from None
    jobs = [d for d in docs if isinstance(d, Mapping) and d.get("kind") == "AsyncRLJob"]
    if not jobs:
        raise JobValidationError(str(path), [("kind", "no document of kind AsyncRLJob")])
    return validate_job(jobs[0], str(path))
