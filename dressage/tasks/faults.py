"""What the job's own code did wrong, said once per distinct error, with where it was raised.

A reward function, an environment class or a blackbox agent program that fails during rollout
is the user's to fix, not the infrastructure's. Each failure is captured as a `UserCodeFault`:
the job field and the import path (or command) of the code, the exception type and message, and
the *user frame*, the innermost traceback frame in the user's own files (not in Dressage, the
standard library or an installed package), so a `KeyError` raised by a helper of the reward
points at that helper's line. A blackbox program's fault is read from the Python traceback on
its standard error.

Faults are collected in a `UserCodeFaults` registry, one per run: the entry point creates it
and the pipeline hands it to what records faults (the reward function, the agents, the rollout
process, which keeps one of its own and sends its entries back) and to the report. The
first occurrence of each distinct error (same code, exception type and raising line) is logged
with its frame, later ones are only counted, and the registry's entries are what `report.json`
lists under `user_code_errors`. A failure that fails its prompt group is raised as
`UserCodeFailed`, a `GroupFailed` that carries the fault, so the retry policy can name user
code in its stop message, and stop at once when the job says so (`onRewardError: stop`).
"""

from __future__ import annotations

import logging
import os
import re
import sysconfig
import threading
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import dressage
from dressage.data.groups import GroupFailed

log = logging.getLogger(__name__)

REWARD_FIELD: Final = "spec.task.reward"
ENVIRONMENT_FIELD: Final = "spec.task.environment"
AGENT_FIELD: Final = "spec.task.agentCommand"
ENVIRONMENT_RAISED: Final = "environment_raised"
"""The failure reason of an environment whose `episode()` or `step()` raised."""

_DRESSAGE_DIR = Path(dressage.__file__).resolve().parent
_PATHS = sysconfig.get_paths()
_STDLIB_DIRS = tuple(Path(_PATHS[k]).resolve() for k in ("stdlib", "platstdlib") if k in _PATHS)
_PACKAGE_DIRS = tuple(Path(_PATHS[k]).resolve() for k in ("purelib", "platlib") if k in _PATHS)
_FRAME_LINE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')
_EXCEPTION_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<message>.*))?$")


@dataclass(frozen=True)
class UserFrame:
    """Where user code raised: a file, a line and the function around it."""

    file: str
    line: int
    function: str
    code: str | None = None
    """The source line, when the file can be read."""

    def __str__(self) -> str:
        return f"{_display_path(self.file)}:{self.line}, in {self.function}"


@dataclass(frozen=True)
class UserCodeFault:
    """One failure of the job's own code: which code, what it raised, where."""

    field: str
    """The job field that names the code (`spec.task.reward`, `spec.task.environment`,
    `spec.task.agentCommand`)."""
    reference: str
    """Its import path (`rewards:score`, `envs:Maze`) or its command line."""
    reason: str
    """The failure reason it is counted under (`reward_raised`, `environment_raised`, ...)."""
    message: str
    """The exception's message, or what went wrong when nothing was raised (a timeout)."""
    error_type: str | None = None
    """The exception's type name; None when nothing was raised."""
    call: str | None = None
    """The method that failed, for an object's code (`step()`, `episode()`)."""
    frame: UserFrame | None = None

    @property
    def key(self) -> tuple[object, ...]:
        """What makes two failures the same error: the code, the reason, the exception type
        and the raising line (not the message, which often holds the data that failed)."""
        where = None if self.frame is None else (self.frame.file, self.frame.line)
        return (self.field, self.reference, self.call, self.reason, self.error_type, where)

    def __str__(self) -> str:
        what = f"{self.field} {self.reference}"
        if self.call is not None:
            what += f": {self.call}"
        if self.error_type is None:
            what += f": {self.message}"
        else:
            what += f" raised {self.error_type}" + (f": {self.message}" if self.message else "")
        return what if self.frame is None else f"{what} (at {self.frame})"

    def to_dict(self) -> dict[str, Any]:
        """The fault as `report.json` lists it."""
        return {
            "field": self.field,
            "reference": self.reference,
            "reason": self.reason,
            "call": self.call,
            "type": self.error_type,
            "message": self.message,
            "file": None if self.frame is None else self.frame.file,
            "line": None if self.frame is None else self.frame.line,
            "function": None if self.frame is None else self.frame.function,
            "code": None if self.frame is None else self.frame.code,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UserCodeFault:
        """The fault `to_dict` wrote (a `report.json` entry)."""
        frame = None
        if data.get("file") is not None:
            frame = UserFrame(
                str(data["file"]), int(data["line"]), str(data["function"]), data.get("code")
            )
        return cls(
            field=str(data["field"]),
            reference=str(data["reference"]),
            reason=str(data["reason"]),
            message=str(data["message"]),
            error_type=data.get("type"),
            call=data.get("call"),
            frame=frame,
        )


class UserCodeFailed(GroupFailed):
    """A prompt group failed because the job's own code did; `fault` says what and where.

    `stop` names the job setting that makes this failure end the run at once (`spec.task.
    onRewardError is stop`); `dropped` the drop reason of one that drops its group at once
    (`reward_error`, `environment_error` under `onRewardError: drop`); with neither, the group
    is left to the retry policy like any failure.
    """

    def __init__(
        self, fault: UserCodeFault, *, stop: str | None = None, dropped: str | None = None
    ) -> None:
        super().__init__(fault.reason, f"{fault.reason}: {fault}", dropped=dropped)
        self.fault = fault
        self.stop = stop

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_failed, (type(self), self.fault, self.stop, self.dropped))


def _rebuild_failed(
    cls: type[UserCodeFailed], fault: UserCodeFault, stop: str | None, dropped: str | None = None
) -> UserCodeFailed:
    return cls(fault, stop=stop, dropped=dropped)


# --- capture ---------------------------------------------------------------------------------


def fault_from_exception(
    exc: BaseException, *, field: str, reference: str, reason: str, call: str | None = None
) -> UserCodeFault:
    """The fault of `exc`, raised by the code `field` names, with its user frame."""
    return UserCodeFault(
        field=field,
        reference=reference,
        reason=reason,
        message=str(exc),
        error_type=type(exc).__name__,
        call=call,
        frame=raised_at(exc),
    )


def raised_at(exc: BaseException) -> UserFrame | None:
    """The user frame of `exc`'s traceback (see `user_frame`)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return user_frame([(f.filename, f.lineno or 0, f.name, f.line) for f in frames])


def fault_from_stderr(
    stderr: str, *, field: str, reference: str, reason: str, exit_code: int | None
) -> UserCodeFault:
    """The fault of a program that exited `exit_code`: the exception and user frame of the
    last Python traceback on its standard error, else the exit code and the last line."""
    lines = [line.rstrip() for line in stderr.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(lines) if line.startswith("Traceback (")]
    if starts:
        frames: list[tuple[str, int, str, str | None]] = []
        exception: re.Match[str] | None = None
        for i, line in enumerate(lines[starts[-1] + 1 :], starts[-1] + 1):
            match = _FRAME_LINE.match(line)
            if match is not None:
                following = lines[i + 1] if i + 1 < len(lines) else ""
                code = following.strip() if _is_source_line(following) else None
                frames.append((match["file"], int(match["line"]), match["function"].strip(), code))
            elif frames and not line.startswith((" ", "\t")):
                exception = _EXCEPTION_LINE.match(line)
                break
        if exception is not None:
            return UserCodeFault(
                field=field,
                reference=reference,
                reason=reason,
                message=(exception["message"] or "").strip(),
                error_type=exception["type"].rpartition(".")[2],
                frame=user_frame(frames),
            )
    tail = lines[-1].strip()[:200] if lines else "(nothing on standard error)"
    return UserCodeFault(
        field=field, reference=reference, reason=reason, message=f"exited {exit_code}: {tail}"
    )


def _is_source_line(line: str) -> bool:
    """Whether a traceback line is a frame's source (indented deeper than the frame line, not
    the next frame, not the `^^^` markers under it)."""
    return (
        line.startswith("    ")
        and _FRAME_LINE.match(line) is None
        and bool(line.strip().strip("^~ "))
    )


def user_frame(frames: Sequence[tuple[str, int, str, str | None]]) -> UserFrame | None:
    """The innermost of `(file, line, function, code)` frames (outermost first) that is the
    user's: outside Dressage, the standard library and installed packages; failing that, the
    innermost outside Dressage and the standard library (a user's installed package); None
    when every frame is Dressage's or Python's own."""
    for is_users in (_is_user_file, _is_not_ours):
        for file, line, function, code in reversed(frames):
            if is_users(file):
                text = code.strip() if code else None
                return UserFrame(file=file, line=line, function=function, code=text or None)
    return None


def _is_not_ours(file: str) -> bool:
    """Neither Dressage's nor Python's own (the standard library, `<frozen ...>` modules)."""
    if file.startswith("<"):
        return False
    path = Path(file).resolve()
    if path.is_relative_to(_DRESSAGE_DIR):
        return False
    return _is_installed(path) or not any(path.is_relative_to(d) for d in _STDLIB_DIRS)


def _is_user_file(file: str) -> bool:
    """The user's own: not ours, and not an installed package."""
    return _is_not_ours(file) and not _is_installed(Path(file).resolve())


def _is_installed(path: Path) -> bool:
    # A virtual environment's site-packages lies inside its standard library directory.
    return any(path.is_relative_to(d) for d in _PACKAGE_DIRS) or bool(
        {"site-packages", "dist-packages"} & set(path.parts)
    )


def _display_path(file: str) -> str:
    """`file` relative to the working directory when it lies below it, else as it is."""
    try:
        relative = os.path.relpath(file)
    except ValueError:
        return file
    return file if relative.startswith("..") else relative


# --- the registry ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FaultCount:
    """A distinct fault (as first seen) and how often it occurred."""

    fault: UserCodeFault
    count: int

    def to_dict(self) -> dict[str, Any]:
        return {**self.fault.to_dict(), "count": self.count}


def merge_reports(*reports: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`report.json` fault lists (`FaultCount.to_dict`) as one: the same error once, its
    counts summed (a resumed run's report keeps the errors of its earlier invocations)."""
    tally = FaultTally()
    for report in reports:
        for entry in report:
            tally.add(UserCodeFault.from_dict(entry), int(entry["count"]))
    return [entry.to_dict() for entry in tally.entries()]


class FaultTally:
    """Distinct faults with their counts, in first-seen order (not thread-safe)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[object, ...], FaultCount] = {}

    def add(self, fault: UserCodeFault, count: int = 1) -> bool:
        """Count `fault` `count` times; whether it was new."""
        seen = self._entries.get(fault.key)
        self._entries[fault.key] = FaultCount(
            fault if seen is None else seen.fault, count + (0 if seen is None else seen.count)
        )
        return seen is None

    def entries(self) -> list[FaultCount]:
        return list(self._entries.values())

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def summary(self, limit: int = 3, unit: str = "calls") -> str:
        """The most frequent faults, `<fault> (N <unit>); ...`, for a one-line message: `unit`
        says what a count counts (failed `calls` of the code, failed group `attempts`)."""
        ranked = sorted(self._entries.values(), key=lambda c: -c.count)
        text = "; ".join(f"{c.fault} ({c.count} {unit})" for c in ranked[:limit])
        if len(ranked) > limit:
            text += f"; and {len(ranked) - limit} more"
        return text


class UserCodeFaults:
    """The distinct user-code faults of one process (thread-safe): `record` logs a fault the
    first time it is seen and counts every occurrence."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tally = FaultTally()

    def record(self, fault: UserCodeFault, *, then: str | None = None) -> bool:
        """Count `fault`, logging it when it is new with `then`, what happens next (the
        sample gets 0, the group is retried); whether it was new."""
        with self._lock:
            new = self._tally.add(fault)
        if new:
            log.warning("%s", describe(fault, then=then))
        return new

    def entries(self) -> list[FaultCount]:
        with self._lock:
            return self._tally.entries()

    def absorb(self, entries: Iterable[FaultCount]) -> None:
        """Take in another process's entries (its cumulative counts, logged there already)."""
        with self._lock:
            known = {e.fault.key: e.count for e in self._tally.entries()}
            for entry in entries:
                more = entry.count - known.get(entry.fault.key, 0)
                if more > 0:
                    self._tally.add(entry.fault, more)

    def clear(self) -> None:
        with self._lock:
            self._tally.clear()

    def report(self) -> list[dict[str, Any]]:
        """The entries as `report.json` lists them (`user_code_errors`)."""
        return [entry.to_dict() for entry in self.entries()]


def describe(fault: UserCodeFault, *, then: str | None = None) -> str:
    """`fault` as the log shows it the first time: the fault, its source line when known, what
    happens next, and that it is not logged again."""
    text = f"user code failed: {fault}"
    if fault.frame is not None and fault.frame.code:
        text += f"\n    {fault.frame.code}"
    later = "later occurrences of this error are counted, not logged"
    return f"{text}\n  {then}; {later}" if then else f"{text}\n  {later}"
