"""The strict Kubernetes schemas, loaded once per kind and release, judge an object as
`kubernetes_validate.validate(obj, release, strict=True)` does, and report every problem."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
from dressage_operator import schemas
from dressage_operator.apirules import format_path
from dressage_operator.children_check import rendered_children, schema_problems

from .support import CONFIG, OWNER, cluster_job


def _children() -> list[dict[str, Any]]:
    return rendered_children(cluster_job(), OWNER, CONFIG)


def _broken() -> list[dict[str, Any]]:
    pod = next(c for c in _children() if c["kind"] == "Pod")
    typo = copy.deepcopy(pod)
    typo["spec"]["tolerations"] = [{"key": "gpu", "operater": "Exists"}]
    wrong_type = copy.deepcopy(pod)
    wrong_type["spec"]["tolerations"] = [{"key": "gpu", "tolerationSeconds": "30"}]
    deep = copy.deepcopy(pod)
    deep["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpression": [{"key": "gpu", "operator": "In"}]}]
            }
        }
    }
    return [typo, wrong_type, deep]


@pytest.mark.parametrize("obj", [*_children(), *_broken()], ids=lambda o: o["kind"])
def test_the_verdict_is_kubernetes_validates(obj: dict[str, Any]) -> None:
    try:
        kubernetes_validate.validate(obj, "1.33.0", strict=True)
        valid = True
    except kubernetes_validate.ValidationError:
        valid = False
    assert (schemas.problems(obj, "1.33") == []) is valid


def test_every_problem_is_reported_at_its_field() -> None:
    typo, wrong_type, deep = _broken()
    both = copy.deepcopy(typo)
    both["spec"]["tolerations"] += wrong_type["spec"]["tolerations"]
    assert schemas.problems(both, "1.33") == [
        (("spec", "tolerations", 0, "operater"), "unknown field 'operater'"),
        (("spec", "tolerations", 1, "tolerationSeconds"), "'30' is not of type 'integer', 'null'"),
    ]
    ((path, message),) = schemas.problems(deep, "1.33")
    assert path == (
        "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms", 0, "matchExpression",
    )  # fmt: skip
    assert message == "unknown field 'matchExpression'"


def test_each_kind_and_release_is_loaded_once() -> None:
    first = schemas.validator("Pod", "v1", "1.33")
    assert schemas.validator("Pod", "v1", "1.33") is first
    assert schemas.validator("Pod", "v1", "1.30") is not first


@pytest.mark.parametrize(
    ("server", "release"),
    [
        ("v1.31.2", "1.31"),
        ("v1.30.0-gke.1200", "1.30"),
        ("1.28", "1.28"),
        ("v1.20.4", "1.25"),  # older than the oldest schemas: the oldest
        ("v1.99.0", kubernetes_validate.latest_version()[:4]),  # newer: the newest
        (None, "1.33"),
        ("unknown", "1.33"),
    ],
)
def test_the_schema_release_is_the_api_servers_within_what_is_shipped(
    server: str | None, release: str
) -> None:
    assert schemas.schema_release(server, "1.33") == release


@pytest.mark.parametrize("obj", [*_children(), *_broken()], ids=lambda o: o["kind"])
def test_the_operators_check_of_the_passed_through_parts_finds_what_the_whole_schema_finds(
    obj: dict[str, Any],
) -> None:
    """The job can only bring unknown fields or wrong types through the parts the model takes
    as free-form objects: checking those against their definitions finds every problem."""
    whole = {format_path(p) for p, _ in schemas.problems(obj, "1.33")}
    parts = {format_path(p) for p, _ in schema_problems(obj, "1.33")}
    assert parts == whole
