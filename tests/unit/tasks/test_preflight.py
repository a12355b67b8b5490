"""The checks a job's task gets before any engine starts: the dataset read (columns, usable
rows), the environment built, a blackbox program found, the reward dry-called on the first
usable row; each failure a `ConfigurationError` naming the field."""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dressage.api.job import TaskSpec
from dressage.api.loader import ConfigurationError
from dressage.tasks.dataset import DatasetError, DatasetTask
from dressage.tasks.task_checks import preflight
from dressage.tasks.usercode import UserCodeError

USER_CODE = """\
from dressage.tasks.base import Step


def good(completion, row):
    return {"correct": float(completion == row["answer"]), "short": 1.0}


def wrong_column(completion, row):
    return float(completion == row["solution"])


class Game:
    name = "game"
    max_turns = 3

    def __init__(self, spec):
        self.size = spec.params["size"]

    def episode(self, index):
        raise AssertionError("episodes are not started by the checks")
"""


@pytest.fixture
def module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    name = f"user_preflight_{abs(hash(tmp_path)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(USER_CODE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    yield name
    sys.modules.pop(name, None)


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _dataset(path: Path, reward: str | None = None, **dataset: Any) -> TaskSpec:
    return TaskSpec.model_validate(
        {
            "name": "dataset",
            "dataset": {
                "path": str(path),
                "promptColumn": "q",
                "answerColumn": "answer",
                **dataset,
            },
            **({"reward": reward} if reward else {}),
        }
    )


ROWS = [{"q": "1+1=", "answer": "2"}, {"q": "2+2=", "answer": "4"}]


def test_a_good_dataset_job_passes_and_says_what_was_checked(tmp_path: Path, module: str) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [{"q": ""}, *ROWS])
    checked = preflight(_dataset(path, f"{module}:good"))
    assert checked.notes == (
        f"{path}: 2 usable rows, 1 skipped",
        f"reward {module}:good gives 2 to the answer of {path} line 2",
    )
    # The dry call is not part of the run's figures.
    assert isinstance(checked.task, DatasetTask)
    assert checked.task.reward_stats.snapshot() == {"samples": 0, "failures": {}, "parts": {}}
    assert checked.task.reward_function.faults.entries() == []


def test_a_dataset_with_no_usable_row_is_refused(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [{"question": "1+1="}, {"q": "", "answer": "1"}])
    with pytest.raises(DatasetError, match=r"has no usable row \(2 bad; first: .*d\.jsonl line 1 "):
        preflight(_dataset(path))


def test_a_parquet_file_missing_a_column_is_refused_with_the_likely_one(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist([{"q": "1+1=", "answr": "2"}]), tmp_path / "d.parquet")
    with pytest.raises(
        DatasetError, match=r"no column 'answer' \(did you mean 'answr'\?\); columns: q, answr"
    ):
        preflight(_dataset(tmp_path / "d.parquet"))


def test_a_reward_failing_its_dry_call_names_the_row_and_the_line(
    tmp_path: Path, module: str
) -> None:
    path = _jsonl(tmp_path / "d.jsonl", ROWS)
    with pytest.raises(UserCodeError) as refused:
        preflight(_dataset(path, f"{module}:wrong_column"))
    first, code = str(refused.value).splitlines()
    assert first.startswith(f"spec.task.reward {module}:wrong_column raised KeyError: 'solution' ")
    assert f"{module}.py:9, in wrong_column)" in first
    assert first.endswith(f"dry-called on {path} line 1 with its answer '2' as the completion")
    assert code == '    return float(completion == row["solution"])'


def test_a_reward_is_not_dry_called_without_an_answer_column(tmp_path: Path, module: str) -> None:
    path = _jsonl(tmp_path / "d.jsonl", ROWS)
    spec = _dataset(path, f"{module}:wrong_column", answerColumn=None)
    assert preflight(spec).notes[1] == (
        f"reward {module}:wrong_column not dry-called: without an answerColumn no completion "
        "is known to be right"
    )


def test_an_environment_is_built_but_no_episode_started(module: str) -> None:
    spec = TaskSpec.model_validate(
        {"name": "environment", "environment": f"{module}:Game", "params": {"size": 3}}
    )
    assert preflight(spec).notes == ("environment game built (max 3 turns)",)


def test_an_environment_that_cannot_be_built_names_the_line(module: str) -> None:
    spec = TaskSpec.model_validate({"name": "environment", "environment": f"{module}:Game"})
    with pytest.raises(UserCodeError) as refused:
        preflight(spec)
    first, code = str(refused.value).splitlines()
    assert first.startswith(
        f"spec.task.environment: {module}:Game(spec) raised KeyError: 'size' (at "
    )
    assert first.endswith(f"{module}.py:17, in __init__)")
    assert code == '    self.size = spec.params["size"]'


def test_a_blackbox_agent_needs_a_program_that_exists_and_a_single_turn_task(
    tmp_path: Path, module: str
) -> None:
    path = _jsonl(tmp_path / "d.jsonl", ROWS)
    missing = _dataset(path).model_copy(
        update={"agent": "blackbox", "agent_command": ["no-such-agent-xyz", "--fast"]}
    )
    with pytest.raises(ConfigurationError, match=r"agentCommand: 'no-such-agent-xyz' is not an"):
        preflight(missing)
    found = missing.model_copy(update={"agent_command": [sys.executable, "agent.py"]})
    assert preflight(found).notes[0].endswith("2 usable rows")
    environment = TaskSpec.model_validate(
        {"name": "household", "agent": "blackbox", "agentCommand": [sys.executable]}
    )
    with pytest.raises(ConfigurationError, match=r"spec\.task\.agent: household is a multi-turn"):
        preflight(environment)


def test_an_unknown_task_is_a_configuration_error() -> None:
    """The job model refuses an unknown name when the manifest is read
    (`tests/unit/api/test_task_names.py`); a spec built without validation still gets a
    configuration error naming the field."""
    with pytest.raises(ConfigurationError, match=r"spec\.task\.name: unknown task 'nope'"):
        preflight(TaskSpec.model_construct(name="nope"))
