"""The `dataset` task: prompts from JSONL, Parquet and `datasets` sources in the dataset's own
order, resumable at any position, with bad rows reported, skipped and counted."""

from __future__ import annotations

import json
import logging
import pickle
import random
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from dressage.api.job import TaskSpec
from dressage.tasks import get_task
from dressage.tasks.dataset import (
    BAD_ANSWER,
    BAD_PROMPT,
    LOGGED_BAD_ROWS,
    MISSING_COLUMN,
    NOT_AN_OBJECT,
    NOT_JSON,
    BadRow,
    DatasetError,
    DatasetTask,
    bad_row_counts,
)

ROWS = [{"question": f"{i}+1=", "answer": str(i + 1), "level": i % 3} for i in range(5)]


def _jsonl(path: Path, rows: list[Any]) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
        encoding="utf-8",
    )
    return path


def _task(dataset: dict[str, Any], **task: Any) -> DatasetTask:
    spec = TaskSpec.model_validate({"name": "dataset", "dataset": dataset, **task})
    built = get_task(spec)
    assert isinstance(built, DatasetTask)
    return built


def _qa(path: Path, **more: Any) -> dict[str, Any]:
    return {"path": str(path), "promptColumn": "question", "answerColumn": "answer", **more}


def test_jsonl_prompts_come_in_file_order_and_cycle(tmp_path: Path) -> None:
    task = _task(_qa(_jsonl(tmp_path / "d.jsonl", ROWS)))
    assert len(task) == 5
    assert [task.prompt(i).text for i in range(7)] == [
        "0+1=",
        "1+1=",
        "2+1=",
        "3+1=",
        "4+1=",
        "0+1=",
        "1+1=",
    ]
    p = task.prompt(3)
    assert (p.index, p.answer, dict(p.row)) == (3, "4", ROWS[3])


def test_parquet_gives_the_same_prompts_as_jsonl(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "d.parquet")
    parquet = _task(_qa(tmp_path / "d.parquet"))
    jsonl = _task(_qa(_jsonl(tmp_path / "d.jsonl", ROWS)))
    assert [parquet.prompt(i) for i in range(12)] == [jsonl.prompt(i) for i in range(12)]
    assert parquet.prompt(2).row == ROWS[2]


def test_a_rebuilt_task_resumes_at_a_data_position(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", ROWS)
    first = _task(_qa(path))
    seen = [first.prompt(i).text for i in range(8)]
    resumed = _task(_qa(path))  # a restart: only the data position (8) survives
    assert [resumed.prompt(i).text for i in range(8, 13)] == [
        first.prompt(i).text for i in range(8, 13)
    ]
    assert seen[5:8] == seen[0:3]


def test_bad_rows_are_reported_skipped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows: list[Any] = [
        ROWS[0],
        "{not json",
        {"question": "", "answer": "1"},
        {"answer": "2"},
        [1, 2],
        {"question": "7+1=", "answer": None},
        "",
        ROWS[1],
    ]
    path = _jsonl(tmp_path / "bad.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="dressage.tasks.dataset"):
        task = _task(_qa(path))
    assert [task.prompt(i).text for i in range(3)] == ["0+1=", "1+1=", "0+1="]
    assert task.bad_row_count == 5
    # Numbered as an editor shows the file: from 1, blank lines included.
    assert [(b.unit, b.number, b.column) for b in task.bad_rows] == [
        ("line", 2, None),
        ("line", 3, "question"),
        ("line", 4, "question"),
        ("line", 5, None),
        ("line", 6, "answer"),
    ]
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[task.bad_rows[2].number - 1] == json.dumps({"answer": "2"})
    assert str(task.bad_rows[2]) == f"{path} line 4 column 'question': missing"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for bad in task.bad_rows:
        assert str(bad) in logged
    assert task.bad_row_counts() == {
        BAD_PROMPT: 1,
        MISSING_COLUMN: 1,
        BAD_ANSWER: 1,
        NOT_AN_OBJECT: 1,
        NOT_JSON: 1,
    }
    assert bad_row_counts(task) == task.bad_row_counts()
    assert bad_row_counts(get_task(TaskSpec())) == {}  # a built-in task has no dataset


def test_past_the_logged_bad_rows_a_line_says_the_rest_are_only_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rows: list[Any] = [ROWS[0], *([{"answer": "2"}] * 30), *(["{not json"] * 5)]
    path = _jsonl(tmp_path / "many.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="dressage.tasks.dataset"):
        task = _task(_qa(path))
    messages = [r.getMessage() for r in caplog.records]
    one_by_one = [m for m in messages if m.startswith(f"skipping {path} line")]
    assert len(one_by_one) == LOGGED_BAD_ROWS
    (rest,) = [m for m in messages if m.startswith("skipping 15 more")]
    assert f"only the first {LOGGED_BAD_ROWS} are logged" in rest
    assert rest.endswith("missing_column 10, not_json 5")
    assert task.bad_row_counts() == {MISSING_COLUMN: 30, NOT_JSON: 5}


def test_bad_rows_of_a_table_are_numbered_from_one(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [ROWS[0], {"question": "", "answer": "1"}, ROWS[1]]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    task = _task(_qa(tmp_path / "d.parquet"))
    assert [str(b) for b in task.bad_rows] == [
        f"{tmp_path / 'd.parquet'} row 2 column 'question': prompt must be non-empty text, got ''"
    ]
    assert task.location(1) == f"{tmp_path / 'd.parquet'} row 3"


def test_a_reward_column_missing_from_a_row_is_a_bad_row(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [ROWS[0], {"question": "x", "answer": "1"}])
    task = _task(_qa(path, rewardColumns=["level"]))
    assert task.bad_rows == [BadRow(str(path), 2, "level", MISSING_COLUMN, "missing", "line")]
    assert dict(task.prompt(0).row) == {"level": 0, "answer": "1"}


def test_a_column_missing_from_a_parquet_file_names_file_and_column(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "d.parquet")
    with pytest.raises(DatasetError, match=r"d\.parquet has no column 'prompt'; columns: "):
        _task({"path": str(tmp_path / "d.parquet"), "promptColumn": "prompt", "answerColumn": "a"})


def test_a_dataset_without_a_usable_row_is_an_error(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [{"question": " ", "answer": "1"}])
    with pytest.raises(DatasetError, match=r"no usable row \(1 bad; first: .*line 1 column"):
        _task(_qa(path))


def test_a_prompt_column_no_line_has_is_one_error_listing_the_columns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A misspelt `promptColumn` names the field and the columns the file has, in one error
    and before any row is logged (not one `missing` warning per row, then "no usable row")."""
    path = _jsonl(tmp_path / "d.jsonl", [{"prompt": f"{i}+1=", "answer": i + 1} for i in range(20)])
    with (
        caplog.at_level(logging.WARNING, logger="dressage.tasks.dataset"),
        pytest.raises(DatasetError) as raised,
    ):
        _task(_qa(path))
    assert str(raised.value) == (
        f"spec.task.dataset.promptColumn: {path} has no column 'question' in any line; "
        "columns: prompt, answer"
    )
    assert caplog.records == []


def test_a_column_only_some_lines_lack_is_a_bad_row_of_each(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [ROWS[0], {"question": "x"}])
    task = _task(_qa(path))
    assert task.bad_rows == [BadRow(str(path), 2, "answer", MISSING_COLUMN, "missing", "line")]


def test_each_missing_column_names_its_own_field(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [ROWS[0]])
    with pytest.raises(DatasetError, match=r"^spec\.task\.dataset\.answerColumn: .*'ans' "):
        _task({**_qa(path), "answerColumn": "ans"})
    with pytest.raises(DatasetError, match=r"^spec\.task\.dataset\.rewardColumns: .*'lvl' "):
        _task(_qa(path, rewardColumns=["lvl"]))
    with pytest.raises(DatasetError, match=r"^spec\.task\.dataset\.messagesColumn: .*'m' "):
        _task({"path": str(path), "messagesColumn": "m", "answerColumn": "answer"})


def test_a_missing_file_names_the_path_and_where_it_was_looked_for(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"spec.task.dataset.path: nope.jsonl does not exist"):
        _task({"path": "nope.jsonl", "promptColumn": "q", "answerColumn": "a"})


def test_messages_rows_keep_their_roles_and_get_the_system_prompt(tmp_path: Path) -> None:
    rows = [
        {"messages": [{"role": "user", "content": "hi"}], "answer": "1"},
        {
            "messages": [
                {"role": "system", "content": "own"},
                {"role": "user", "content": "q"},
            ],
            "answer": "2",
        },
        {"messages": [{"role": "robot", "content": "x"}], "answer": "3"},
    ]
    path = _jsonl(tmp_path / "m.jsonl", rows)
    task = _task(
        {
            "path": str(path),
            "messagesColumn": "messages",
            "answerColumn": "answer",
            "systemPrompt": "be brief",
        }
    )
    assert task.prompt(0).messages == (
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    )
    assert task.prompt(1).messages == tuple(rows[1]["messages"])
    assert task.prompt(1).text == "q"
    assert "role 'robot'" in task.bad_rows[0].reason


def test_a_dataset_saved_by_datasets_loads_from_disk(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "saved"))
    task = _task(_qa(tmp_path / "saved"))
    assert [task.prompt(i).text for i in range(6)] == [r["question"] for r in ROWS] + ["0+1="]
    assert task.prompt(4).row == ROWS[4]


def test_a_hub_builder_loads_data_files_through_datasets(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    path = _jsonl(tmp_path / "d.jsonl", ROWS)
    task = _task(
        {
            "hub": "json",
            "dataFiles": [str(path)],
            "split": "train",
            "cacheDir": str(tmp_path / "cache"),
            "promptColumn": "question",
            "answerColumn": "answer",
        }
    )
    assert [task.prompt(i).answer for i in range(5)] == [r["answer"] for r in ROWS]
    assert task.source.startswith("json[train]")


def test_a_hub_dataset_that_cannot_be_loaded_names_it(tmp_path: Path) -> None:
    pytest.importorskip("datasets")
    with pytest.raises(DatasetError, match=r"spec.task.dataset.hub: cannot load json\[test\]"):
        _task(
            {
                "hub": "json",
                "dataFiles": [str(tmp_path / "absent.jsonl")],
                "split": "test",
                "cacheDir": str(tmp_path / "cache"),
                "promptColumn": "q",
                "answerColumn": "a",
            }
        )


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ({"name": "dataset"}, "task.dataset is set exactly when task.name is 'dataset'"),
        ({"dataset": {"path": "x", "promptColumn": "q"}}, "task.dataset is set exactly"),
        (
            {"name": "dataset", "dataset": {"path": "x", "hub": "y", "promptColumn": "q"}},
            "exactly one of path and hub",
        ),
        (
            {"name": "dataset", "dataset": {"path": "x"}},
            "exactly one of promptColumn and messagesColumn",
        ),
        (
            {
                "name": "dataset",
                "dataset": {
                    "path": "x",
                    "promptColumn": "q",
                    "promptFormat": "raw",
                    "systemPrompt": "s",
                },
            },
            "promptFormat: raw",
        ),
        ({"reward": "math"}, "apply to the 'dataset' task only"),
    ],
)
def test_inconsistent_dataset_settings_are_refused(task: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        TaskSpec.model_validate(task)


def test_shuffle_is_one_fixed_order_per_seed(tmp_path: Path) -> None:
    rows = [{"question": f"q{i}", "answer": "1"} for i in range(20)]
    path = _jsonl(tmp_path / "d.jsonl", rows)
    one = _task(_qa(path, shuffle=True), seed=1)
    again = _task(_qa(path, shuffle=True), seed=1)
    other = _task(_qa(path, shuffle=True), seed=2)
    order = [one.prompt(i).text for i in range(20)]
    assert sorted(order) == sorted(r["question"] for r in rows)
    assert order != [r["question"] for r in rows]
    assert [again.prompt(i).text for i in range(40)] == order + order
    assert [other.prompt(i).text for i in range(20)] != order


def test_a_built_task_travels_to_another_process_without_reading_its_file_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The rollout process (`spec.rollout.separateProcess`) gets the parent's task pickled.
    path = _jsonl(tmp_path / "d.jsonl", [*ROWS, {"answer": "1"}])
    task = _task(_qa(path))
    path.unlink()  # nothing may read it again
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dressage.tasks.dataset"):
        again = pickle.loads(pickle.dumps(task))
    assert not caplog.records  # its bad row is not logged a second time
    assert [again.prompt(i).text for i in range(5)] == [task.prompt(i).text for i in range(5)]
    assert again.bad_row_counts() == {MISSING_COLUMN: 1}
    assert again.reward(again.prompt(1), "2") == 1.0
    assert again.reward_stats.snapshot()["samples"] == 1  # its own statistics


def test_another_order_of_a_built_task_reuses_its_rows(tmp_path: Path) -> None:
    # The warm start draws its demonstrations from another order than it evaluates on.
    rows = [{"question": f"{i}+1=", "answer": str(i + 1)} for i in range(20)]
    path = _jsonl(tmp_path / "d.jsonl", rows)
    plain = _task(_qa(path))
    shuffled = _task(_qa(path, shuffle=True), seed=3)
    path.unlink()
    assert plain.with_seed(1003) is plain  # without shuffle the order is the file's
    other = shuffled.with_seed(1003)
    assert other.seed == 1003
    assert sorted(other.positions) == sorted(shuffled.positions)
    assert other.positions != shuffled.positions
    rebuilt_order = list(range(20))
    random.Random("dataset:1003").shuffle(rebuilt_order)
    assert other.positions == rebuilt_order  # as a task built with that seed orders them
