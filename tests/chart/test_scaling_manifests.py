"""The HPA and the KEDA ScaledObject the operator README shows, validated as their API servers
would: the HPA against the Kubernetes `autoscaling/v2` schema (kubernetes-validate, strict),
the ScaledObject against KEDA's CRD schema as `cloudcoil-models-keda` (PyPI) generates it, with
unknown fields refused as a structural schema prunes them, and their PromQL parsed by
`promtool`. Both target the job's scale subresource. Neither an HPA nor KEDA runs here."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from pydantic import BaseModel

from tests.chart.tools import RELEASE, ROOT, by_kind, render, require_tool, run_tool

README = ROOT / "operator" / "README.md"
K8S_VERSION = "1.33.0"
BLOCK = re.compile(r"```yaml\n(.*?)```", re.DOTALL)


def _documents() -> list[dict[str, Any]]:
    found = []
    for block in BLOCK.findall(README.read_text(encoding="utf-8")):
        doc = yaml.safe_load(block)
        if isinstance(doc, dict) and "kind" in doc:
            found.append(doc)
    return found


def _one(kind: str) -> dict[str, Any]:
    (doc,) = [d for d in _documents() if d["kind"] == kind]
    return doc


def _targets_the_jobs_scale(doc: dict[str, Any]) -> None:
    ref = doc["spec"]["scaleTargetRef"]
    assert (ref["apiVersion"], ref["kind"]) == ("dressage.io/v1alpha1", "AsyncRLJob")


def test_the_hpa_is_a_valid_autoscaling_v2_object_on_the_jobs_scale() -> None:
    hpa = _one("HorizontalPodAutoscaler")
    kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
    _targets_the_jobs_scale(hpa)
    (metric,) = hpa["spec"]["metrics"]
    assert metric["external"]["target"] == {"type": "Value", "value": "1"}
    broken = {**hpa, "spec": {**hpa["spec"], "minReplica": 1}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def _verbs(role: dict[str, Any], resource: str) -> set[str]:
    return {
        verb
        for rule in role["rules"]
        if "dressage.io" in rule["apiGroups"] and resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_chart_lets_editors_scale_a_job_and_viewers_read_its_scale() -> None:
    """`kubectl scale arj/NAME` (and an HPA or KEDA acting for a user) reads and writes the
    scale subresource, a resource of its own to RBAC."""
    roles = {r["metadata"]["name"]: r for r in by_kind(render(), "ClusterRole")}
    editor = roles[f"{RELEASE}-asyncrljob-editor"]
    viewer = roles[f"{RELEASE}-asyncrljob-viewer"]
    assert _verbs(editor, "asyncrljobs/scale") == {"get", "update", "patch"}
    assert _verbs(viewer, "asyncrljobs/scale") == {"get", "list", "watch"}


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models inside an annotation (`Optional[X]`, `List[X]`, ...)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in typing.get_args(annotation):
        found += _models(arg)
    return found


def _unknown_fields(model: type[BaseModel], value: Any, path: str) -> list[str]:
    """Keys of `value` that `model` (or the models below it) does not declare: what a
    structural CRD schema would prune, and so a mistake in a manifest."""
    if isinstance(value, list):
        return [u for i, v in enumerate(value) for u in _unknown_fields(model, v, f"{path}[{i}]")]
    if not isinstance(value, dict):
        return []
    fields = {(f.alias or name): f for name, f in model.model_fields.items()}
    unknown = []
    for key, item in value.items():
        field = fields.get(key)
        if field is None:
            unknown.append(f"{path}.{key}")
            continue
        origin = typing.get_origin(field.annotation)
        if origin in (dict, typing.Dict):  # noqa: UP006 (the generated models use typing.Dict)
            continue
        for sub in _models(field.annotation):
            unknown += _unknown_fields(sub, item, f"{path}.{key}")
    return unknown


def test_the_scaled_object_is_valid_against_kedas_crd_schema() -> None:
    keda = pytest.importorskip("cloudcoil.models.keda.v1alpha1")
    scaled = _one("ScaledObject")
    keda.ScaledObject.model_validate(scaled)
    spec = scaled["spec"]
    assert _unknown_fields(keda.ScaledObjectSpec, spec, "spec") == []
    assert _unknown_fields(keda.ScaledObjectSpec, {**spec, "minReplicas": 1}, "spec") == [
        "spec.minReplicas"
    ]
    _targets_the_jobs_scale(scaled)
    (trigger,) = spec["triggers"]
    assert (trigger["type"], trigger["metricType"]) == ("prometheus", "Value")
    assert trigger["metadata"]["threshold"] == "1"


def test_the_documented_promql_parses(tmp_path: Path) -> None:
    """The ScaledObject's query as written; the Prometheus Adapter rule's with its template
    placeholders filled as the adapter fills them."""
    promtool = require_tool("promtool")
    query = _one("ScaledObject")["spec"]["triggers"][0]["metadata"]["query"]
    adapter = next(
        yaml.safe_load(b)
        for b in BLOCK.findall(README.read_text(encoding="utf-8"))
        if "externalRules" in b
    )
    template = adapter["externalRules"][0]["metricsQuery"]
    filled = template.replace("<<.GroupBy>>", "namespace").replace(
        "<<.LabelMatchers>>", 'namespace="rl",dressage_job="train"'
    )
    rules = [
        {"record": f"dressage:scaling_manifest:{i}", "expr": expr}
        for i, expr in enumerate([query, filled])
    ]
    rule_file = tmp_path / "scaling.yaml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "scaling", "rules": rules}]}))
    result = run_tool([promtool, "check", "rules", str(rule_file)])
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_helpers_walk_optional_and_list_annotations() -> None:
    class Leaf(BaseModel):
        a: int = 0

    class Root(BaseModel):
        leaves: list[Leaf] | None = None
        one: Leaf | types.NoneType = None

    assert _unknown_fields(Root, {"leaves": [{"a": 1}, {"b": 2}], "one": {"c": 3}}, "x") == [
        "x.leaves[1].b",
        "x.one.c",
    ]
