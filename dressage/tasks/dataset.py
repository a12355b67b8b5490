"""The `dataset` task: prompts from a JSONL or Parquet file or a Hugging Face dataset, scored by
the job's reward (`dressage.tasks.rewards`).

Rows are read once when the task is built and checked: every row needs a text prompt (or a list
of `{role, content}` messages), an answer when an answer column is set, and every reward
column. A row that fails is reported (logged with its file, its line or row counted from 1 as
an editor does, and its column) and skipped; the skipped rows stay listed in `bad_rows`, so
nothing is lost silently, and are counted by reason (`BadRow.kind`: `not_json`,
`not_an_object`, `missing_column`, `bad_prompt`, `bad_messages`, `bad_answer`) for the run's
`report.json` and `/metrics` (`bad_row_counts`). The first `LOGGED_BAD_ROWS` are logged one by
one; a line then says that the rest are not, with their count by reason. A dataset without a
column that the spec names (Parquet, `datasets`; in a JSONL file, a column no line has), or with
no usable row at all, is an error: one message naming the spec's field and listing the columns
the data has, before any row is logged.

Order is the dataset's own (or one fixed shuffle of it with `shuffle`): prompt `i` is valid row
`i % len(task)` of that order, so the job's data position (one integer) resumes the stream
exactly, cycling over the dataset epoch after epoch.
"""

from __future__ import annotations

import copy
import difflib
import json
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from dressage.api.job import DatasetSpec, TaskSpec
from dressage.api.loader import ConfigurationError
from dressage.tasks.base import Prompt, Scored
from dressage.tasks.faults import UserCodeFaults
from dressage.tasks.rewards import RewardFunction, RewardStats
from dressage.tasks.usercode import resolve_path

log = logging.getLogger(__name__)

ROLES = frozenset({"system", "user", "assistant", "tool"})
LOGGED_BAD_ROWS: Final = 20
"""Bad rows logged one by one; the rest are counted in one line."""
NOT_JSON: Final = "not_json"
NOT_AN_OBJECT: Final = "not_an_object"
MISSING_COLUMN: Final = "missing_column"
BAD_PROMPT: Final = "bad_prompt"
BAD_MESSAGES: Final = "bad_messages"
BAD_ANSWER: Final = "bad_answer"


class DatasetError(ConfigurationError):
    """The dataset cannot be used at all (missing file or column, no usable row)."""


@dataclass(frozen=True)
class BadRow:
    """A skipped row: where it is and why it cannot be used."""

    source: str
    """The file or dataset it comes from."""
    number: int
    """Where the row is, counting from 1: its line in a JSONL file, as an editor shows it, or
    its row in a table (Parquet, `datasets`)."""
    column: str | None
    """The offending column, or None when the row itself is malformed."""
    kind: str
    """Why, as counted by reason (`NOT_JSON`, `MISSING_COLUMN`, ...)."""
    reason: str
    """What is wrong, in words."""
    unit: str = "row"
    """What `number` counts: `line` (JSONL) or `row` (a table)."""

    def __str__(self) -> str:
        where = f"{self.source} {self.unit} {self.number}"
        if self.column is not None:
            where += f" column {self.column!r}"
        return f"{where}: {self.reason}"


class _Rows:
    """Random access to the rows of a loaded dataset."""

    unit = "row"
    """What a row's number counts in this source (`BadRow.unit`)."""

    def __init__(self, source: str, columns: list[str] | None, count: int) -> None:
        self.source = source
        self.columns = columns
        """Column names when the format has a schema (Parquet, `datasets`), else None."""
        self.count = count
        self.unreadable: list[BadRow] = []

    def bad(self, position: int, column: str | None, kind: str, reason: str) -> BadRow:
        """The bad row at 0-based `position`, numbered from 1 as a user finds it."""
        return BadRow(self.source, position + 1, column, kind, reason, self.unit)

    def get(self, position: int) -> Mapping[str, Any] | None:
        raise NotImplementedError


class _ListRows(_Rows):
    """The lines of a JSONL file (blank ones as None), so position `i` is line `i + 1`."""

    unit = "line"

    def __init__(self, source: str, rows: list[Mapping[str, Any] | None]) -> None:
        super().__init__(source, None, len(rows))
        self.rows = rows
        self.keys: dict[str, None] = {}
        """Every key of any line's object, in the order they first appear."""

    def get(self, position: int) -> Mapping[str, Any] | None:
        return self.rows[position]


class _TableRows(_Rows):
    """A pyarrow table or a `datasets.Dataset` (anything with `column_names` and row slicing)."""

    def __init__(self, source: str, table: Any, *, arrow: bool) -> None:
        super().__init__(source, list(table.column_names), len(table))
        self.table = table
        self.arrow = arrow

    def get(self, position: int) -> Mapping[str, Any] | None:
        if self.arrow:
            row: Mapping[str, Any] = self.table.slice(position, 1).to_pylist()[0]
            return row
        return dict(self.table[position])


def _read_jsonl(path: Path) -> _ListRows:
    rows: list[Mapping[str, Any] | None] = []
    out = _ListRows(str(path), rows)
    with path.open(encoding="utf-8") as f:
        for position, line in enumerate(f):
            if not line.strip():
                rows.append(None)  # not a row, and not a bad one
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                out.unreadable.append(out.bad(position, None, NOT_JSON, f"not JSON ({exc})"))
                rows.append(None)
                continue
            if not isinstance(value, dict):
                out.unreadable.append(
                    out.bad(
                        position, None, NOT_AN_OBJECT, f"a {type(value).__name__}, not an object"
                    )
                )
                rows.append(None)
                continue
            rows.append(value)
            out.keys.update(dict.fromkeys(value))
    out.count = len(rows)
    return out


def _load(spec: DatasetSpec) -> _Rows:
    if spec.hub is not None:
        return _load_hub(spec)
    assert spec.path is not None
    path = resolve_path(spec.path, "spec.task.dataset.path")
    if path.is_dir():
        return _load_saved(path, spec)
    fmt = spec.format
    if fmt == "auto":
        fmt = "parquet" if path.suffix == ".parquet" else "jsonl"
    if fmt == "parquet":
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except Exception as exc:
            raise DatasetError(
                f"spec.task.dataset.path: cannot read {path} as Parquet: {exc}"
            ) from exc
        return _TableRows(str(path), table, arrow=True)
    return _read_jsonl(path)


def _load_saved(path: Path, spec: DatasetSpec) -> _Rows:
    import datasets

    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:
        raise DatasetError(
            f"spec.task.dataset.path: {path} is a directory but not a dataset saved by "
            f"datasets' save_to_disk: {exc}"
        ) from exc
    if isinstance(loaded, datasets.DatasetDict):
        if spec.split not in loaded:
            raise DatasetError(
                f"spec.task.dataset.split: {path} has no split {spec.split!r}; "
                f"splits: {', '.join(loaded)}"
            )
        loaded = loaded[spec.split]
    return _TableRows(f"{path}[{spec.split}]", loaded, arrow=False)


def _load_hub(spec: DatasetSpec) -> _Rows:
    import datasets

    name = spec.hub
    source = f"{name}{'/' + spec.subset if spec.subset else ''}[{spec.split}]"
    if spec.revision:
        source += f"@{spec.revision}"
    try:
        loaded = datasets.load_dataset(
            name,
            spec.subset,
            split=spec.split,
            revision=spec.revision,
            data_files=spec.data_files,
            cache_dir=spec.cache_dir,
        )
    except Exception as exc:
        raise DatasetError(
            f"spec.task.dataset.hub: cannot load {source}: {type(exc).__name__}: {exc}"
        ) from exc
    return _TableRows(source, loaded, arrow=False)


class DatasetTask:
    """Single-turn prompts from dataset rows, scored by the job's reward function."""

    name = "dataset"

    def __init__(self, spec: DatasetSpec, reward: RewardFunction, *, seed: int = 0) -> None:
        self.spec = spec
        self.seed = seed
        self.reward_function = reward
        rows = _load(spec)
        self.source = rows.source
        self._rows = rows
        self.bad_rows: list[BadRow] = list(rows.unreadable)
        """Every skipped row with where and why (also logged)."""
        self._check_columns(rows)
        self.positions: list[int] = []
        """0-based source position of each valid row, in order."""
        for position in range(rows.count):
            row = rows.get(position)
            if row is None:
                continue
            problem = self._check_row(row)
            if problem is None:
                self.positions.append(position)
            else:
                self.bad_rows.append(rows.bad(position, *problem))
        if spec.shuffle:
            random.Random(f"dataset:{seed}").shuffle(self.positions)
        self.bad_rows.sort(key=lambda b: b.number)
        self._log_bad_rows()
        if not self.positions:
            first = f"; first: {self.bad_rows[0]}" if self.bad_rows else ""
            raise DatasetError(
                f"spec.task.dataset: {self.source} has no usable row "
                f"({len(self.bad_rows)} bad{first})"
            )

    def with_seed(self, seed: int) -> DatasetTask:
        """This task with the prompt order of `seed` (the warm start draws its demonstrations
        from another order than its evaluation): the rows are not read or checked again, so
        bad rows are not logged twice. Without `shuffle` the order is the same."""
        if seed == self.seed or not self.spec.shuffle:
            return self
        other = copy.copy(self)
        other.seed = seed
        other.positions = sorted(self.positions)
        random.Random(f"dataset:{seed}").shuffle(other.positions)
        return other

    def _log_bad_rows(self) -> None:
        for bad in self.bad_rows[:LOGGED_BAD_ROWS]:
            log.warning("skipping %s", bad)
        rest = self.bad_rows[LOGGED_BAD_ROWS:]
        if rest:
            by_reason = _by_reason(rest)
            log.warning(
                "skipping %d more bad rows of %s without logging each (only the first %d are "
                "logged; the run's report counts them all by reason): %s",
                len(rest),
                self.source,
                LOGGED_BAD_ROWS,
                ", ".join(f"{k} {n}" for k, n in by_reason.items()),
            )

    # The Task interface ---------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def bad_row_count(self) -> int:
        """Rows skipped because they cannot be used."""
        return len(self.bad_rows)

    def bad_row_counts(self) -> dict[str, int]:
        """Rows skipped because they cannot be used, by reason (`BadRow.kind`)."""
        return _by_reason(self.bad_rows)

    @property
    def reward_stats(self) -> RewardStats:
        """Reward calls, failures by reason and named-part means."""
        return self.reward_function.stats

    def location(self, index: int) -> str:
        """Where the row behind prompt `index` is, as a user finds it (`data.jsonl line 3`)."""
        position = self.positions[index % len(self.positions)]
        return f"{self.source} {self._rows.unit} {position + 1}"

    def row(self, index: int) -> Mapping[str, Any]:
        """All columns of the row behind prompt `index`."""
        row = self._rows.get(self.positions[index % len(self.positions)])
        assert row is not None
        return row

    def prompt(self, index: int) -> Prompt:
        spec = self.spec
        row = self.row(index)
        answer = "" if spec.answer_column is None else _text(row[spec.answer_column])
        columns = spec.reward_columns
        passed = dict(row) if columns is None else {c: row[c] for c in columns}
        if spec.answer_column is not None:
            passed[spec.answer_column] = row[spec.answer_column]
        if spec.messages_column is not None:
            messages = tuple(
                {"role": m["role"], "content": m["content"]} for m in row[spec.messages_column]
            )
            if spec.system_prompt is not None and messages[0]["role"] != "system":
                messages = ({"role": "system", "content": spec.system_prompt}, *messages)
            users = [m["content"] for m in messages if m["role"] == "user"]
            text = users[-1] if users else messages[-1]["content"]
            return Prompt(index, text, answer, messages=messages, row=passed)
        assert spec.prompt_column is not None
        text = row[spec.prompt_column]
        if spec.prompt_format == "raw":
            return Prompt(index, text, answer, raw=True, row=passed)
        if spec.system_prompt is not None:
            messages = (
                {"role": "system", "content": spec.system_prompt},
                {"role": "user", "content": text},
            )
            return Prompt(index, text, answer, messages=messages, row=passed)
        return Prompt(index, text, answer, row=passed)

    def reward(self, prompt: Prompt, completion: str) -> float:
        return self.reward_function.score([completion], [prompt.row])[0]

    async def areward(self, prompt: Prompt, completion: str) -> float:
        """`reward` without blocking the event loop."""
        return (await self.reward_function.ascore([completion], [prompt.row]))[0]

    async def ascored(self, prompt: Prompt, completion: str) -> Scored:
        """`areward` with the reward's named parts and failure reason."""
        return (await self.reward_function.ascored([completion], [prompt.row]))[0]

    def rewards(self, prompts: Sequence[Prompt], completions: Sequence[str]) -> list[float]:
        """Rewards of several samples in one call (one call of a batched reward function)."""
        return self.reward_function.score(list(completions), [p.row for p in prompts])

    # Checks ---------------------------------------------------------------------------------

    def _required(self) -> list[str]:
        return list(self._required_fields())

    def _required_fields(self) -> dict[str, str]:
        """Each column a row needs -> the spec field that names it."""
        spec = self.spec
        if spec.prompt_column is not None:
            fields = {spec.prompt_column: "promptColumn"}
        else:
            assert spec.messages_column is not None
            fields = {spec.messages_column: "messagesColumn"}
        if spec.answer_column is not None:
            fields.setdefault(spec.answer_column, "answerColumn")
        for column in spec.reward_columns or []:
            fields.setdefault(column, "rewardColumns")
        return fields

    def _check_columns(self, rows: _Rows) -> None:
        """A column the spec names that the data does not have at all is one error naming the
        field, the column and the columns there are: not a bad row per row (a misspelt
        `promptColumn` would otherwise log every row before saying there is no usable one)."""
        if rows.columns is not None:
            columns, where = rows.columns, ""
        elif isinstance(rows, _ListRows) and rows.keys:
            columns, where = list(rows.keys), f" in any {rows.unit}"
        else:
            return  # no row could be read: the rows themselves are the error
        for column, field in self._required_fields().items():
            if column in columns:
                continue
            close = difflib.get_close_matches(column, columns, n=1)
            guess = f" (did you mean {close[0]!r}?)" if close else ""
            raise DatasetError(
                f"spec.task.dataset.{field}: {rows.source} has no column {column!r}{where}"
                f"{guess}; columns: {', '.join(columns)}"
            )

    def _check_row(self, row: Mapping[str, Any]) -> tuple[str, str, str] | None:
        """`(column, kind, reason)` of the first problem of `row`, or None."""
        spec = self.spec
        for column in self._required():
            if column not in row:
                return column, MISSING_COLUMN, "missing"
        if spec.prompt_column is not None:
            value = row[spec.prompt_column]
            if not isinstance(value, str) or not value.strip():
                return (
                    spec.prompt_column,
                    BAD_PROMPT,
                    f"prompt must be non-empty text, got {value!r:.80}",
                )
        else:
            assert spec.messages_column is not None
            problem = _messages_problem(row[spec.messages_column])
            if problem is not None:
                return spec.messages_column, BAD_MESSAGES, problem
        if spec.answer_column is not None:
            value = row[spec.answer_column]
            if value is None or isinstance(value, bool) or not isinstance(value, str | int | float):
                return (
                    spec.answer_column,
                    BAD_ANSWER,
                    f"answer must be text or a number, got {value!r:.80}",
                )
        return None


def _by_reason(rows: Sequence[BadRow]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for bad in rows:
        counts[bad.kind] = counts.get(bad.kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def use_faults(task: object, faults: UserCodeFaults) -> None:
    """Have a dataset task's reward function record its failures in `faults`, the run's
    registry (other tasks run no user code that records faults)."""
    if isinstance(task, DatasetTask):
        task.reward_function.faults = faults


def bad_row_counts(task: object) -> dict[str, int]:
    """A task's skipped dataset rows by reason (empty for a task without a dataset)."""
    return task.bad_row_counts() if isinstance(task, DatasetTask) else {}


def _messages_problem(value: Any) -> str | None:
    if not isinstance(value, list) or not value:
        return f"messages must be a non-empty list, got {value!r:.80}"
    for i, message in enumerate(value):
        if not isinstance(message, Mapping):
            return f"message {i} is not an object"
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            return f"message {i} has role {role!r}, not one of {', '.join(sorted(ROLES))}"
        if not isinstance(content, str):
            return f"message {i} content must be text, got {content!r:.80}"
    return None


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def from_spec(spec: TaskSpec) -> DatasetTask:
    if spec.dataset is None:
        raise ConfigurationError("spec.task.dataset: the dataset task needs a dataset")
    if spec.max_turns not in (None, 1):
        raise ConfigurationError(
            f"spec.task.maxTurns: the dataset task is single-turn, got {spec.max_turns}"
        )
    if spec.params:
        raise ConfigurationError(
            f"spec.task.params: the dataset task takes none, got {sorted(spec.params)}"
        )
    reward = RewardFunction.from_spec(spec, spec.dataset.answer_column)
    return DatasetTask(spec.dataset, reward, seed=spec.seed)
