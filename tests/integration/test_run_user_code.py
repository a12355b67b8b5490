"""`dressage run` with the job's own data and code, as a user runs it from the job's directory.

Configuration errors (a dataset without a usable row, a Parquet file missing a column, an
environment whose constructor raises, a reward that fails its dry call, a typo'd field) exit 2
before any engine starts and leave no report. A reward that fails under `onRewardError: stop`
stops the run at its first failure, naming the reward, the exception and the user's line, in
the output and in `report.json`. A run in which every reward call fails exits 1 after its last
step with a summary of the failures by reason, the dataset's bad rows by reason and what was
counted but not logged. A reward of named parts reports them over each trained batch. Under
`onRewardError: drop` a reward that times out drops its sample's group, counted as
`reward_error`, and the run trains on the others. A finished run rerun says there is nothing
to do, and nothing about resuming.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from dressage_testkit.trainer import small_model

from tests.engine_forks import run_command

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

USER_CODE = """\
import json, os


def score(completion, row):
    with open(os.path.join(os.path.dirname(__file__), "calls.jsonl"), "a") as f:
        f.write(json.dumps(completion) + "\\n")
    return check(completion, row)


def check(completion, row):
    if completion != row["answer"]:
        raise ValueError(f"not the answer: {completion!r}")
    return 1.0


def wrong_column(completion, row):
    return float(completion == row["solution"])


class Game:
    name = "game"
    max_turns = 2

    def __init__(self, spec):
        self.size = spec.params["size"]


CALLS = []


def first_only(completion, row):
    # The pre-flight dry call (this process's first call) passes; every rollout call fails.
    CALLS.append(completion)
    if len(CALLS) > 1:
        raise RuntimeError("reward service unavailable")
    return 1.0


def parts(completion, row):
    return {"correct": float(completion == row["answer"]), "short": 1.0 - len(completion) / 10}


class _Episode:
    prompt = "Say a number."

    def step(self, action):
        return int(action)

    def expert_action(self):
        return "1"


class Broken:
    name = "broken"
    max_turns = 1

    def __init__(self, spec):
        pass

    def episode(self, index):
        return _Episode()


def flaky(completion, row):
    # The pre-flight's dry call passes; in rollout the grading service times out on one row.
    CALLS.append(completion)
    if len(CALLS) > 1 and row["answer"] == "2":
        raise TimeoutError("grader timed out")
    return float(completion == row["answer"])
"""
ROWS = [{"question": f"{a}+1=", "answer": str(a + 1)} for a in range(4)]


def _job(job_dir: Path, name: str, task: dict[str, Any], **spec: Any) -> Path:
    manifest = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": name},
        "spec": {
            "model": {"source": str(job_dir / "model"), "dtype": "float32"},
            "task": task,
            "rollout": {"mode": "sync", "groupSize": 2, "batchSize": 2, "maxNewTokens": 3},
            "training": {"steps": 1, "learningRate": 1e-3},
            "local": {"metricsPort": 0, "cacheDir": str(job_dir / "cache")},
            **spec,
        },
    }
    path = job_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def _dataset(path: str, **more: Any) -> dict[str, Any]:
    return {
        "name": "dataset",
        "dataset": {"path": path, "promptColumn": "question", "answerColumn": "answer"},
        **more,
    }


def _run(job_dir: Path, manifest: Path, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    return run_command(
        [sys.executable, "-m", "dressage", "run", manifest.name, "--workdir", "runs"],
        cwd=job_dir,  # as a user runs it: their modules and files are found there
        env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1"),
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("job")
    small_model(out / "model")
    (out / "job_code.py").write_text(USER_CODE)
    (out / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (out / "empty.jsonl").write_text('{"question": ""}\n{"prompt": "1+1=", "answer": 2}\n')
    bad = ["{not json", json.dumps({"question": "9+1="}), json.dumps({"question": "", "answer": 1})]
    (out / "some_bad.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in ROWS) + "\n".join(bad)
    )
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{"question": "1+1=", "ans": "2"}]), out / "t.parquet")
    return out


CONFIGURATION_ERRORS = {
    "no-usable-row": (
        _dataset("empty.jsonl"),
        "empty.jsonl has no usable row (2 bad; first: ",
    ),
    "prompt-column": (
        {"name": "dataset", "dataset": {**_dataset("rows.jsonl")["dataset"], "promptColumn": "q"}},
        "rows.jsonl has no column 'q' in any line; columns: question, answer",
    ),
    "parquet-column": (
        _dataset("t.parquet"),
        "t.parquet has no column 'answer' (did you mean 'ans'?); columns: question, ans",
    ),
    "environment-init": (
        {"name": "environment", "environment": "job_code:Game"},
        "spec.task.environment: job_code:Game(spec) raised KeyError: 'size' (at job_code.py:25, "
        "in __init__)",
    ),
    "reward-dry-call": (
        _dataset("rows.jsonl", reward="job_code:wrong_column"),
        "spec.task.reward job_code:wrong_column raised KeyError: 'solution' (at job_code.py:17, "
        "in wrong_column), dry-called on ",
    ),
    "typo": (
        {"name": "dataset", "dataset": {"path": "rows.jsonl", "promtColumn": "question"}},
        "spec.task.dataset.promtColumn: unknown field; did you mean promptColumn?",
    ),
}


@pytest.mark.parametrize("case", sorted(CONFIGURATION_ERRORS))
def test_a_configuration_error_exits_2_before_any_engine_starts_and_leaves_no_report(
    job_dir: Path, case: str
) -> None:
    task, says = CONFIGURATION_ERRORS[case]
    done = _run(job_dir, _job(job_dir, f"bad-{case}", task))
    assert done.returncode == 2, done.stdout + done.stderr
    assert says in done.stderr
    assert "Traceback" not in done.stderr
    assert "engines ready" not in done.stdout
    assert not (job_dir / "runs" / f"bad-{case}").exists()


def test_stop_on_a_reward_error_stops_at_the_first_failure_naming_the_users_line(
    job_dir: Path,
) -> None:
    calls = job_dir / "calls.jsonl"
    calls.unlink(missing_ok=True)
    manifest = _job(
        job_dir,
        "stop",
        _dataset("rows.jsonl", reward="job_code:score", onRewardError="stop"),
        rollout={"mode": "fully_async", "groupSize": 2, "batchSize": 2, "concurrency": 2,
                 "maxRetries": 3, "maxNewTokens": 3},
    )  # fmt: skip
    done = _run(job_dir, manifest)
    assert done.returncode == 1, done.stdout + done.stderr
    # The dry call passed (the answer is its own reward); rollout's first failure stopped it.
    assert "checked before starting: " in done.stdout
    assert "reward job_code:score gives 1 to the answer of " in done.stdout
    stopped = [line for line in done.stderr.splitlines() if line.startswith("dressage run: ")]
    assert len(stopped) == 1
    assert stopped[0].startswith(
        "dressage run: rollout stopped at the first failure (spec.task.onRewardError is stop): "
        "spec.task.reward job_code:score raised ValueError: not the answer: "
    )
    assert stopped[0].endswith("(at job_code.py:12, in check)")
    # One call for the dry run, then at most the trajectories that were already in flight:
    # no retries of 4 attempts x 8 groups.
    scored = calls.read_text().splitlines()
    assert 2 <= len(scored) <= 1 + 2 * 2
    report = json.loads((job_dir / "runs" / "stop" / "report.json").read_text())
    (error,) = report["user_code_errors"]
    assert error["field"] == "spec.task.reward"
    assert error["reference"] == "job_code:score"
    assert (error["type"], error["function"], error["line"]) == ("ValueError", "check", 12)
    assert Path(error["file"]) == job_dir / "job_code.py"
    assert error["code"] == 'raise ValueError(f"not the answer: {completion!r}")'
    assert error["count"] >= 1


def test_a_finished_run_rerun_has_nothing_to_do_and_does_not_resume(job_dir: Path) -> None:
    manifest = _job(job_dir, "finished", {"name": "arithmetic", "params": {"maxOperand": 9}})
    first = _run(job_dir, manifest)
    assert first.returncode == 0, first.stdout + first.stderr
    assert (job_dir / "runs" / "finished" / "report.json").is_file()
    again = _run(job_dir, manifest)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to do: 1 of 1 steps done" in again.stdout
    assert "resuming" not in again.stdout


def test_a_run_without_one_real_reward_exits_1_with_its_failures_by_reason(job_dir: Path) -> None:
    manifest = _job(
        job_dir,
        "no-reward",
        _dataset("some_bad.jsonl", reward="job_code:first_only"),
        training={"steps": 2, "learningRate": 1e-3},
    )
    done = _run(job_dir, manifest)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "dressage run: no sample of the run got a real reward: every reward call failed, so "
        "every sample was trained with reward 0 (see the run summary and user_code_errors in "
        "the report)"
    )
    out = done.stdout
    assert "  step 1: 4 of 4 samples trained with reward 0, their reward call failed: " in out
    assert "run summary (2 steps, 8 samples trained):" in out
    assert (
        "  samples trained with reward 0 because their reward call failed: 8 of 8 "
        "(reward_raised 8)" in out
    )
    assert (
        "  dataset rows skipped as unusable: 3 (bad_prompt 1, missing_column 1, not_json 1)" in out
    )
    assert "  not logged, counted only: 7 repeated user-code failures" in out
    report = json.loads((job_dir / "runs" / "no-reward" / "report.json").read_text())
    summary = report["summary"]
    assert (summary["samples"], summary["reward_failed_samples"]) == (8, {"reward_raised": 8})
    assert report["dataset"]["bad_rows_by_reason"] == {
        "bad_prompt": 1,
        "missing_column": 1,
        "not_json": 1,
    }
    assert report["dataset"]["usable_rows"] == 4
    assert report["not_logged"] == {"user_code_failures": 7, "bad_rows": 0}
    assert [e["count"] for e in report["user_code_errors"]] == [8]


def test_a_reward_timing_out_under_drop_drops_its_group_and_the_run_trains_on(
    job_dir: Path,
) -> None:
    manifest = _job(
        job_dir,
        "drop",
        _dataset("rows.jsonl", reward="job_code:flaky", onRewardError="drop"),
        training={"steps": 2, "learningRate": 1e-3},
    )
    done = _run(job_dir, manifest)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((job_dir / "runs" / "drop" / "report.json").read_text())
    dropped = sum(step["dropped_groups"].get("reward_error", 0) for step in report["steps"])
    assert dropped >= 1  # an epoch of the 4 rows holds the one whose grader times out
    assert report["summary"]["dropped_groups"]["reward_error"] == dropped
    # Nothing trained with a 0 from the failed calls: their groups never reached a batch.
    assert not report["summary"]["reward_failed_samples"]
    assert [step["samples"] for step in report["steps"]] == [4, 4]
    (error,) = report["user_code_errors"]
    assert (error["type"], error["function"]) == ("TimeoutError", "flaky")
    # The step lines count the drops; the run summary says their reason.
    drops = [int(line.split("  drops ")[1].split()[0]) for line in done.stdout.splitlines()
             if line.startswith("step ")]  # fmt: skip
    assert sum(drops) == dropped
    assert f"  prompt groups dropped: {dropped} (reward_error {dropped})" in done.stdout


def test_named_reward_parts_are_reported_over_each_trained_batch(job_dir: Path) -> None:
    manifest = _job(
        job_dir,
        "parts",
        _dataset("rows.jsonl", reward="job_code:parts", rewardWeights={"correct": 1, "short": 0.5}),
        training={"steps": 2, "learningRate": 1e-3},
    )
    done = _run(job_dir, manifest)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((job_dir / "runs" / "parts" / "report.json").read_text())
    for step in report["steps"]:
        parts = step["reward_parts"]
        assert set(parts) == {"correct", "short"}
        # The trained batch's reward is the weighted sum of its parts' means.
        assert step["reward"] == pytest.approx(parts["correct"] + 0.5 * parts["short"], abs=1e-6)
    assert report["dataset"] == {
        "source": str(job_dir / "rows.jsonl"),
        "usable_rows": 4,
        "bad_rows": 0,
        "bad_rows_by_reason": {},
    }


def test_a_run_the_breaker_stops_before_its_first_step_still_sums_up_its_failures(
    job_dir: Path,
) -> None:
    manifest = _job(
        job_dir,
        "breaker",
        {"name": "environment", "environment": "job_code:Broken"},
        rollout={"mode": "sync", "groupSize": 2, "batchSize": 2, "maxRetries": 1,
                 "maxNewTokens": 3},
    )  # fmt: skip
    done = _run(job_dir, manifest)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "failed attempts since a group last completed" in done.stderr
    out = done.stdout.splitlines()
    assert "run summary (0 steps, 0 samples trained):" in out
    (attempts,) = [x for x in out if x.startswith("  failed prompt-group attempts")]
    assert "(environment_raised " in attempts
    (groups,) = [x for x in out if x.startswith("  prompt groups with a failed attempt: ")]
    assert "(environment_raised " in groups
    (dropped,) = [x for x in out if x.startswith("  prompt groups dropped: ")]
    assert "retries_exhausted" in dropped


def test_the_dataset_is_read_once_by_the_warm_start_and_the_rollout_process(
    job_dir: Path,
) -> None:
    # The pre-flight checks read the dataset; the warm start and the rollout process of its
    # own (`separateProcess`) get that task, so each bad row is logged once.
    manifest = _job(
        job_dir,
        "read-once",
        {
            "name": "dataset",
            "dataset": {"path": "some_bad.jsonl", "promptColumn": "question",
                        "answerColumn": "answer", "shuffle": True},
        },
        model={
            "source": str(job_dir / "model"),
            "dtype": "float32",
            "warmStart": {"targetReward": 1.0, "maxSteps": 2, "batchSize": 4, "evalPrompts": 4},
        },
        rollout={"mode": "fully_async", "groupSize": 2, "batchSize": 2, "maxNewTokens": 3,
                 "separateProcess": True},
    )  # fmt: skip
    done = _run(job_dir, manifest)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rollout in process " in done.stdout
    assert "warm start (trained)" in done.stdout
    skipped = [x for x in done.stderr.splitlines() if "skipping " in x]
    assert len(skipped) == 3, done.stderr  # its three bad rows, each once
