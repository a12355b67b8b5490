"""`report.json`'s held-out evaluations: one record per version with pass@k, the best version,
the plots against step and wall-clock; a resumed run's evaluations replace, never repeat."""

from __future__ import annotations

import json
from pathlib import Path

from dressage.evaluation.figures import Evaluation
from dressage.evaluation.log import EvaluationLog
from dressage.runner.report import EVAL_PLOTS, History, write_report


def _evaluation(version: str, step: int, p1: float) -> dict[str, object]:
    pass_at = {1: p1, 2: min(1.0, 2 * p1)}
    return Evaluation(version, step, 16, 2, p1, pass_at, 1.5, 10.0 * step).to_dict()


def test_the_report_holds_each_versions_evaluation_and_names_the_best(tmp_path: Path) -> None:
    History(tmp_path).append({"step": 1, "version": "v1", "reward": 0.5})
    log = EvaluationLog(tmp_path)
    for version, step, p1 in (("v0", 0, 0.1), ("v25", 25, 0.6), ("v50", 50, 0.4)):
        log.append(_evaluation(version, step, p1))
    report = json.loads(write_report(tmp_path, {"name": "j"}).read_text(encoding="utf-8"))
    assert [e["version"] for e in report["evaluations"]] == ["v0", "v25", "v50"]
    assert report["evaluations"][1]["pass_at"] == {"1": 0.6, "2": 1.0}
    assert report["best_evaluation"]["version"] == "v25"
    for plot in EVAL_PLOTS:
        assert plot in report["plots"]
        assert (tmp_path / plot).stat().st_size > 1000


def test_a_run_without_evaluation_reports_none(tmp_path: Path) -> None:
    History(tmp_path).append({"step": 1, "version": "v1", "reward": 0.5})
    report = json.loads(write_report(tmp_path, {"name": "j"}).read_text(encoding="utf-8"))
    assert "evaluations" not in report
    assert not set(EVAL_PLOTS) & set(report["plots"])


def test_a_resumed_run_replaces_evaluations_past_its_checkpoint(tmp_path: Path) -> None:
    log = EvaluationLog(tmp_path)
    for version, step in (("v0", 0), ("v10", 10), ("v20", 20)):
        log.append(_evaluation(version, step, 0.1))
    log.truncate(10)  # resumed from the checkpoint of step 10
    log.append(_evaluation("v10", 10, 0.3))  # evaluated again at the resume
    assert [(r["version"], r["reward_mean"]) for r in log.read()] == [("v0", 0.1), ("v10", 0.3)]
