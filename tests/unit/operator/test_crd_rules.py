"""The CRD's CEL rules for the fields the operator depends on, evaluated with a CEL
interpreter: one proxy, and the fields that cannot change while a job exists."""

from __future__ import annotations

from typing import Any

import celpy
import yaml

from dressage.api.crd import render_crd


def _spec_schema() -> dict[str, Any]:
    crd = yaml.safe_load(render_crd())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["spec"]


def _rule(section: str, field: str) -> dict[str, Any]:
    rules = _spec_schema()["properties"][section]["x-kubernetes-validations"]
    (rule,) = [r for r in rules if r["fieldPath"] == field]
    return rule


def _cel(rule: dict[str, Any], value: Any, old: Any = None) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(rule["rule"]))
    activation = {"self": celpy.json_to_cel(value)}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(old)
    return bool(program.evaluate(activation))


def test_proxy_replicas_up_to_the_cap_with_the_reason() -> None:
    rule = _rule("proxy", ".replicas")
    assert _cel(rule, {})
    assert _cel(rule, {"replicas": 1})
    assert _cel(rule, {"replicas": 2})
    assert _cel(rule, {"replicas": 16})
    assert not _cel(rule, {"replicas": 17})
    assert "every replica pauses and drains every engine" in rule["message"]
    assert _spec_schema()["properties"]["proxy"]["properties"]["replicas"]["maximum"] == 16


def test_the_proxy_token_secret_cannot_change_while_the_job_exists() -> None:
    rule = _rule("proxy", ".tokenSecret")
    ref = {"tokenSecret": {"name": "a", "key": "t"}}
    assert _cel(rule, ref, ref)
    assert _cel(rule, {}, {})
    assert not _cel(rule, {"tokenSecret": {"name": "b", "key": "t"}}, ref)
    assert not _cel(rule, {}, ref)
    assert not _cel(rule, ref, {})


def test_the_model_revision_cannot_change_while_the_job_exists() -> None:
    rule = _rule("model", ".source")
    old = {"source": "org/m", "revision": "v1"}
    assert _cel(rule, old, old)
    assert not _cel(rule, {"source": "org/m", "revision": "v2"}, old)
    assert not _cel(rule, {"source": "org/m"}, old)
    assert "model.revision" in rule["message"]


def test_the_optimizer_checkpoint_cadence_is_a_multiple_of_the_checkpoint_cadence() -> None:
    rule = _rule("training", ".optimizerCheckpointEvery")
    assert _cel(rule, {})
    assert _cel(rule, {"optimizerCheckpointEvery": 3})
    assert _cel(rule, {"checkpointEvery": 2, "optimizerCheckpointEvery": 6})
    assert not _cel(rule, {"checkpointEvery": 2, "optimizerCheckpointEvery": 3})
    assert "multiple of training.checkpointEvery" in rule["message"]


AUTOSCALED = {
    "replicas": 2,
    "weightSync": "disk",
    "autoscaling": {"minReplicas": 1, "maxReplicas": 4},
}


def test_autoscaling_bounds_must_be_ordered() -> None:
    rule = _rule("inference", ".autoscaling.minReplicas")
    assert _cel(rule, AUTOSCALED)
    assert _cel(rule, {"replicas": 1, "weightSync": "disk"})
    assert not _cel(rule, {**AUTOSCALED, "autoscaling": {"minReplicas": 5, "maxReplicas": 4}})


def test_no_rule_ties_autoscaling_to_a_weight_sync() -> None:
    validations = _spec_schema()["properties"]["inference"]["x-kubernetes-validations"]
    rules = [r["rule"] for r in validations]
    assert not [r for r in rules if "autoscaling" in r and "weightSync" in r]


def test_with_autoscaling_a_new_engine_count_outside_the_bounds_is_refused() -> None:
    """What `kubectl scale` writes through the scale subresource: inside the bounds it is the
    autoscaler's new starting point, outside it is refused; without autoscaling anything goes,
    and an update that leaves the count alone passes even when the bounds moved past it (the
    operator brings it in)."""
    rule = _rule("inference", ".replicas")
    assert _cel(rule, {**AUTOSCALED, "replicas": 3}, AUTOSCALED)
    assert not _cel(rule, {**AUTOSCALED, "replicas": 5}, AUTOSCALED)
    assert not _cel(rule, {**AUTOSCALED, "replicas": 0}, AUTOSCALED)
    narrowed = {**AUTOSCALED, "autoscaling": {"minReplicas": 3, "maxReplicas": 4}}
    assert _cel(rule, narrowed, AUTOSCALED)
    assert _cel(rule, {"replicas": 9, "weightSync": "disk"}, {"replicas": 2, "weightSync": "disk"})
    assert "autoscaling.maxReplicas" in rule["message"]


def test_the_embedded_engine_takes_no_tensor_parallelism_and_no_sglang_arguments() -> None:
    """The job model's refusals for `engine: embedded`, also made by an API server that runs
    the CRD's rules; a job without the field (SGLang, the default) is not concerned."""
    tp = _rule("inference", ".tensorParallelSize")
    args = _rule("inference", ".extraArgs")
    for rule in (tp, args):
        assert _cel(rule, {"replicas": 1})
        assert _cel(rule, {"engine": "embedded", "tensorParallelSize": 1, "extraArgs": []})
    assert _cel(tp, {"engine": "sglang", "tensorParallelSize": 4})
    assert not _cel(tp, {"engine": "embedded", "tensorParallelSize": 2})
    assert _cel(args, {"engine": "sglang", "extraArgs": ["--mem-fraction-static", "0.8"]})
    assert not _cel(args, {"engine": "embedded", "extraArgs": ["--mem-fraction-static", "0.8"]})
