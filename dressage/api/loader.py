"""Reading and validating job manifests, with errors that name the field at fault.

An unknown field anywhere in a manifest (every model of the job forbids them) is reported with
the known field it most resembles, `spec.task.dataset.promtColumn: unknown field; did you mean
promptColumn?`, or with the fields known there when none is close.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from dressage.api.job import AsyncRLJob


class ConfigurationError(ValueError):
    """The job's configuration cannot work: a field, a file or the code it names is wrong.

    Every such error names the field at fault. Entry points exit 2 on one, before starting
    anything, where they can."""


class JobValidationError(ConfigurationError):
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
        errors = [
            (
                _field_path(tuple(e["loc"])),
                unknown_field_message(tuple(e["loc"]))
                if e["type"] == "extra_forbidden"
                else e["msg"],
            )
            for e in exc.errors()
        ]
        raise JobValidationError(source, errors) from None


def unknown_field_message(loc: Sequence[int | str], model: type[BaseModel] = AsyncRLJob) -> str:
    """What to say about the unknown field at `loc` (a pydantic error location from `model`):
    the known field it most resembles, else the fields known at that place."""
    known = known_fields(loc[:-1], model)
    if not known:
        return "unknown field"
    name = str(loc[-1])
    folded = {k.lower().replace("_", ""): k for k in known}
    close = folded.get(name.lower().replace("_", "").replace("-", ""))
    if close is None:
        matches = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        close = matches[0] if matches else None
    if close is not None:
        return f"unknown field; did you mean {close}?"
    return f"unknown field; known here: {', '.join(sorted(known))}"


def known_fields(loc: Sequence[int | str], model: type[BaseModel] = AsyncRLJob) -> list[str]:
    """The field names (as a manifest spells them) of the model found at `loc` below `model`,
    following fields, list items, mapping values and optional or union types; empty when `loc`
    does not lead to a model."""
    types_here: list[Any] = [model]
    for part in loc:
        following: list[Any] = []
        for kind in _expand(types_here):
            following.extend(_step(kind, part))
        if not following:
            # pydantic names the member of a union of models it tried: `...<ClassName>...`.
            named = [k for k in _expand(types_here) if getattr(k, "__name__", None) == part]
            if not named:
                return []
            following = named
        types_here = following
    for kind in _expand(types_here):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            return [info.alias or name for name, info in kind.model_fields.items()]
    return []


def _expand(kinds: Sequence[Any]) -> list[Any]:
    """`kinds` with optional and union types and `Annotated` wrappers opened up."""
    out: list[Any] = []
    for kind in kinds:
        origin = typing.get_origin(kind)
        if origin is typing.Annotated:
            out.extend(_expand([typing.get_args(kind)[0]]))
        elif origin is typing.Union or origin is types.UnionType:
            out.extend(_expand([a for a in typing.get_args(kind) if a is not type(None)]))
        else:
            out.append(kind)
    return out


def _step(kind: Any, part: int | str) -> list[Any]:
    """The types one location part below `kind`: a model's field, a list's item, a mapping's
    value."""
    origin = typing.get_origin(kind)
    if isinstance(kind, type) and issubclass(kind, BaseModel) and isinstance(part, str):
        for name, info in kind.model_fields.items():
            if part in (name, info.alias):
                return [info.annotation]
        return []
    if origin in (list, tuple, Sequence) and isinstance(part, int):
        return [a for a in typing.get_args(kind) if a is not Ellipsis][:1]
    if origin in (dict, Mapping) and isinstance(part, str):
        return list(typing.get_args(kind)[1:2])
    return []


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
