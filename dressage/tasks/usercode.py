"""User code named in a job: `package.module:attribute` references and where they are found.

A job names its reward function (`spec.task.reward`) and its environment class
(`spec.task.environment`) by import path. `dressage run` makes the job manifest's directory and
the working directory importable (`add_job_dir`), so a `rewards.py` next to the manifest is
found as `rewards:my_reward`; relative dataset paths are looked up in the same two places
(`resolve_path`). On a cluster, `dressage train` runs in the job's code directory on its
storage (`spec.code.path`, `enter_code_dir`), so the same references and relative paths work
there. A reference that cannot be imported is a `UserCodeError` naming the field,
the import path and the directories searched.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dressage.api.loader import ConfigurationError

if TYPE_CHECKING:
    from dressage.api.job import AsyncRLJobSpec

_job_dirs: list[Path] = []


class UserCodeError(ConfigurationError):
    """A job's user code cannot be used: its reference does not resolve, it cannot be built,
    or it fails its dry run before the job starts."""


def add_job_dir(manifest: str | Path) -> list[str]:
    """Put the manifest's directory and the working directory at the front of `sys.path` (each
    once) and remember the manifest's directory for `resolve_path`; the directories added."""
    job_dir = Path(manifest).resolve().parent
    if job_dir not in _job_dirs:
        _job_dirs.insert(0, job_dir)
    added = [d for d in dict.fromkeys((str(job_dir), os.getcwd())) if d not in sys.path]
    sys.path[:0] = added
    importlib.invalidate_caches()
    return added


def enter_code_dir(spec: AsyncRLJobSpec) -> Path | None:
    """Make `spec.code.path` (on the job's storage) the working directory and importable, as
    the trainer pods need before the task is built; None when the job names no code."""
    directory = spec.code.directory(spec.storage.mount_path)
    if directory is None:
        return None
    path = Path(directory)
    if not path.is_dir():
        raise UserCodeError(
            f"spec.code.path: {directory} is not a directory on the job's storage (copy the "
            "job's code there before starting it)"
        )
    os.chdir(path)
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
        importlib.invalidate_caches()
    return path


def job_dirs() -> list[Path]:
    """Where relative paths and modules of the job are looked up: the manifest's directory
    (when `add_job_dir` registered one) then the working directory."""
    cwd = Path.cwd()
    return [*_job_dirs, *([cwd] if cwd not in _job_dirs else [])]


def resolve_path(path: str, field: str) -> Path:
    """`path` itself when absolute, else the first existing one of it under `job_dirs()`."""
    candidate = Path(path).expanduser()
    if candidate.is_absolute():
        if not candidate.exists():
            raise UserCodeError(f"{field}: {path} does not exist")
        return candidate
    tried = [d / candidate for d in job_dirs()]
    for full in tried:
        if full.exists():
            return full
    raise UserCodeError(
        f"{field}: {path} does not exist (looked in {', '.join(str(t.parent) for t in tried)})"
    )


def import_object(reference: str, field: str) -> Any:
    """The object named by `reference`, `package.module:attribute` (attribute may be dotted)."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise UserCodeError(
            f"{field}: {reference!r} is not an import path of the form 'package.module:name'"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        searched = ", ".join(list(dict.fromkeys(p or "." for p in sys.path))[:4])
        raise UserCodeError(
            f"{field}: cannot import module {module_name!r} of {reference!r}: "
            f"{type(exc).__name__}: {exc} (sys.path starts with {searched})"
        ) from exc
    value: Any = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise UserCodeError(
                f"{field}: module {module_name!r} ({getattr(module, '__file__', '?')}) has no "
                f"attribute {attribute!r}"
            ) from None
    return value
