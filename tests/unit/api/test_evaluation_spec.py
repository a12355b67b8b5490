"""`spec.evaluation`: defaults, the k of pass@k, and errors that name the field at fault."""

from __future__ import annotations

import pytest

from dressage.api import JobValidationError, validate_job
from dressage.api.evaluation import EvaluationSpec


def _manifest(evaluation: object, **spec: object) -> dict[str, object]:
    base: dict[str, object] = {"model": {"source": "builtin:tiny"}, "evaluation": evaluation}
    base.update(spec)
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "job-a"},
        "spec": base,
    }


def test_an_empty_evaluation_takes_greedy_pass_at_1_on_the_held_out_split() -> None:
    job = validate_job(_manifest({}))
    evaluation = job.spec.evaluation
    assert evaluation is not None
    assert (evaluation.temperature, evaluation.samples_per_prompt, evaluation.dataset) == (
        0.0,
        1,
        None,
    )
    assert evaluation.ks() == [1]
    assert job.to_wire()["spec"]["evaluation"]["everySteps"] == 10  # type: ignore[index]


def test_no_evaluation_by_default() -> None:
    assert validate_job(_manifest(None)).spec.evaluation is None


@pytest.mark.parametrize(("n", "ks"), [(1, [1]), (2, [1, 2]), (8, [1, 2, 4, 8]), (6, [1, 2, 4, 6])])
def test_pass_at_k_is_reported_for_powers_of_two_and_n(n: int, ks: list[int]) -> None:
    assert EvaluationSpec(samples_per_prompt=n, temperature=1.0).ks() == ks


@pytest.mark.parametrize(
    ("evaluation", "spec", "named"),
    [
        ({"everySteps": 0}, {}, "everySteps"),
        ({"prompts": 0}, {}, "prompts"),
        ({"samplesPerPrompt": 4}, {}, "evaluation.samplesPerPrompt"),
        ({"temperature": -1}, {}, "temperature"),
        ({"maxConcurrency": 300, "temperature": 1.0}, {}, "evaluation.maxConcurrency"),
        ({"bogus": 1}, {}, "bogus"),
        (
            {},
            {
                "task": {
                    "name": "dataset",
                    "dataset": {"path": "d.jsonl", "promptColumn": "q"},
                }
            },
            "evaluation.dataset",
        ),
        (
            {"dataset": {"path": "t.jsonl", "promptColumn": "q"}},
            {"task": {"name": "arithmetic"}},
            "evaluation.dataset",
        ),
        ({}, {"task": {"name": "environment", "environment": "m:C"}}, "evaluation"),
    ],
)
def test_bad_evaluation_settings_name_the_field(
    evaluation: dict[str, object], spec: dict[str, object], named: str
) -> None:
    with pytest.raises(JobValidationError, match=named):
        validate_job(_manifest(evaluation, **spec))


def test_a_dataset_task_evaluates_on_its_test_split() -> None:
    job = validate_job(
        _manifest(
            {"dataset": {"hub": "org/math", "split": "test", "promptColumn": "q"}},
            task={"name": "dataset", "dataset": {"hub": "org/math", "promptColumn": "q"}},
        )
    )
    assert job.spec.evaluation is not None
    assert job.spec.evaluation.dataset is not None
    assert job.spec.evaluation.dataset.split == "test"
