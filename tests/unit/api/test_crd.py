"""The AsyncRLJob CRD: generated from the job model, structural, valid, and in step.

kmock (the API emulation used by the operator tests) validates nothing, so the schema and
its CEL rules are checked here: the CRD object against the real Kubernetes schemas
(kubernetes-validate, strict), manifests against the CRD's openAPIV3Schema (jsonschema), and
the CEL rules with a CEL interpreter (cel-python).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import pytest
import yaml
from dressage_operator import crdgen

from dressage.api import validate_job
from dressage.api.crd import CRD_FILE, build_crd, render_crd, to_structural

ROOT = Path(__file__).resolve().parents[3]
CRD_PATH = ROOT / "crds" / CRD_FILE
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
K8S_VERSION = "1.33.0"


def _root_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_PATH.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _as_json_schema(node: Any) -> Any:
    """OpenAPI v3 `nullable` and extensions -> JSON Schema, for validating manifests."""
    if isinstance(node, list):
        return [_as_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _as_json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    if out.pop("nullable", False) and "type" in out:
        out["type"] = [out["type"], "null"]
    if out.get("exclusiveMinimum") is True:
        out["exclusiveMinimum"] = out.pop("minimum")
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False  # the API server prunes; strict kubectl refuses
    return out


def _schema_errors(manifest: dict[str, Any]) -> list[str]:
    validator = jsonschema.Draft202012Validator(_as_json_schema(_root_schema()))
    return [".".join(str(p) for p in e.absolute_path) for e in validator.iter_errors(manifest)]


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        found.append((path, node))
        for key, child in node.get("properties", {}).items():
            found += _walk(child, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            found += _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            found += _walk(node["additionalProperties"], f"{path}{{}}")
    return found


def test_crd_file_is_generated_from_the_model(tmp_path: Path) -> None:
    assert CRD_PATH.read_text() == render_crd(), "run scripts/gen-crds.sh"
    assert crdgen.main(["--check"]) == 0
    (tmp_path / CRD_FILE).write_text("stale")
    assert crdgen.main(["--check", "--out-dir", str(tmp_path)]) == 1


def test_crd_is_a_valid_kubernetes_object() -> None:
    crd = yaml.safe_load(CRD_PATH.read_text())
    kubernetes_validate.validate(crd, K8S_VERSION, strict=True)
    names = crd["spec"]["names"]
    assert (crd["metadata"]["name"], names["kind"], names["shortNames"]) == (
        "asyncrljobs.dressage.io",
        "AsyncRLJob",
        ["arj"],
    )
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1"
    # The scale subresource: `kubectl scale`, an HPA and KEDA drive the engine count.
    assert version["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.inference.replicas",
            "statusReplicasPath": ".status.inference.replicas",
            "labelSelectorPath": ".status.inference.selector",
        },
    }
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[:6] == ["Phase", "Step", "Weight Version", "Span Max", "Lag Max", "Dropped"]
    # `Span Max` is a flat 1 without partial rollout; `Lag Max` is how stale the data is.
    lag = version["additionalPrinterColumns"][4]
    assert lag["jsonPath"] == ".status.staleness.versionLagMax"
    # The top line tells the truth: why a job waits or failed is a column of `kubectl get`.
    assert columns[-2:] == ["Age", "Message"]
    message = version["additionalPrinterColumns"][-1]
    assert (message["jsonPath"], message.get("priority", 0)) == (".status.message", 0)


def test_schema_is_structural() -> None:
    """Every node has a type (or preserves unknown fields); no JSON-Schema-only constructs."""
    for path, node in _walk(_root_schema()):
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        for banned in ("$ref", "anyOf", "oneOf", "allOf", "title", "const", "$defs"):
            assert banned not in node, f"{path} has {banned}"
        assert not ("properties" in node and "additionalProperties" in node), path
        if "default" in node and node["type"] == "object":
            assert node["default"] == {}, path


def test_defaults_ranges_and_enums_come_from_the_model() -> None:
    spec = _root_schema()["properties"]["spec"]["properties"]
    keep = spec["staleness"]["properties"]["keepVersions"]
    assert (keep["default"], keep["minimum"]) == (0, 0)
    assert spec["rollout"]["properties"]["mode"]["enum"] == ["sync", "fully_async", "partial_async"]
    lr = spec["training"]["properties"]["learningRate"]
    assert (lr["minimum"], lr["exclusiveMinimum"]) == (0.0, True)
    assert spec["staleness"]["properties"]["maxPartialRolloutPreempts"]["nullable"] is True
    assert spec["staleness"]["default"] == {}
    assert "Batch-level control" in spec["staleness"]["properties"]["keepVersions"]["description"]


def test_scalar_unions_become_markers_the_api_server_accepts() -> None:
    """`dict[str, int | float | str]` (task params) has no structural type: its values keep
    unknown fields; `int | str` is the Kubernetes int-or-string marker; other unions fail."""
    spec = _root_schema()["properties"]["spec"]["properties"]
    params = spec["task"]["properties"]["params"]
    assert params["type"] == "object"
    assert params["additionalProperties"] == {"x-kubernetes-preserve-unknown-fields": True}
    int_or_string = to_structural({"anyOf": [{"type": "integer"}, {"type": "string"}]}, {})
    assert int_or_string == {"x-kubernetes-int-or-string": True}
    with pytest.raises(ValueError, match="structurally"):
        to_structural({"anyOf": [{"type": "integer"}, {"type": "object"}]}, {})


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate_against_schema_and_model(example: Path) -> None:
    manifest = yaml.safe_load(example.read_text())
    assert _schema_errors(manifest) == []
    assert validate_job(manifest).metadata.name == manifest["metadata"]["name"]
    for rule_owner, rules in _cel_rules():
        for rule in rules:
            value = _at(manifest, rule_owner)
            old = value if "oldSelf" in rule["rule"] else None  # an unchanged update passes
            assert _cel(rule["rule"], value, old), (example.name, rule["rule"])


@pytest.mark.parametrize(
    ("spec_patch", "field"),
    [
        ({"staleness": {"keepVersions": -1}}, "spec.staleness.keepVersions"),
        ({"rollout": {"mode": "eventually"}}, "spec.rollout.mode"),
        ({"rollout": {"groupSize": "many"}}, "spec.rollout.groupSize"),
        ({"trainer": {"nodes": 0}}, "spec.trainer.nodes"),
        ({"training": {"learningRate": 0}}, "spec.training.learningRate"),
        ({"model": None}, "spec"),
    ],
)
def test_schema_refuses_invalid_fields_and_names_them(
    spec_patch: dict[str, Any], field: str
) -> None:
    manifest = yaml.safe_load((ROOT / "examples" / "local-tiny.yaml").read_text())
    for key, value in spec_patch.items():
        if value is None:
            del manifest["spec"][key]
        else:
            manifest["spec"][key] = {**manifest["spec"].get(key, {}), **value}
    assert field in _schema_errors(manifest)


# --- CEL rules ------------------------------------------------------------------------------


def _cel_rules() -> list[tuple[str, list[dict[str, Any]]]]:
    return [
        (path, node["x-kubernetes-validations"])
        for path, node in _walk(_root_schema())
        if "x-kubernetes-validations" in node
    ]


def _at(manifest: dict[str, Any], path: str) -> Any:
    node: Any = manifest
    for part in [p for p in path.split(".") if p]:
        node = node.get(part, {})
    return node


def _cel(rule: str, value: Any, old: Any = None) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(rule))
    activation = {"self": celpy.json_to_cel(value)}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(old)
    return bool(program.evaluate(activation))


def _rules_at(path: str) -> list[dict[str, Any]]:
    return dict(_cel_rules())[path]


def test_cel_preempt_limit_needs_partial_rollout() -> None:
    (rule, _) = _rules_at(".spec")
    limit = {"staleness": {"maxPartialRolloutPreempts": 2}}
    assert not _cel(rule["rule"], limit | {"rollout": {"mode": "fully_async"}})
    assert _cel(rule["rule"], limit | {"rollout": {"mode": "partial_async"}})
    assert _cel(rule["rule"], limit | {"proxy": {"partialRollout": True}})
    assert "maxPartialRolloutPreempts" in rule["message"]


def test_cel_blackbox_needs_agent_command() -> None:
    (_, rule) = _rules_at(".spec")
    assert not _cel(rule["rule"], {"task": {"agent": "blackbox"}})
    assert _cel(rule["rule"], {"task": {"agent": "blackbox", "agentCommand": ["a"]}})
    assert _cel(rule["rule"], {"task": {"agent": "whitebox"}})


def test_cel_immutable_model_source_and_storage() -> None:
    (model_rule,) = _rules_at(".spec.model")
    assert _cel(model_rule["rule"], {"source": "a"}, {"source": "a"})
    assert not _cel(model_rule["rule"], {"source": "b"}, {"source": "a"})
    (storage_rule,) = _rules_at(".spec.storage")
    pvc = {"persistentVolumeClaim": "x"}
    assert _cel(storage_rule["rule"], pvc, pvc)
    assert not _cel(storage_rule["rule"], {"persistentVolumeClaim": "y"}, pvc)
    assert not _cel(storage_rule["rule"], {}, pvc)


def test_cel_job_name_fits_child_names() -> None:
    (rule,) = _rules_at("")
    assert _cel(rule["rule"], {"metadata": {"name": "local-tiny"}})
    assert not _cel(rule["rule"], {"metadata": {"name": "1job"}})
    assert not _cel(rule["rule"], {"metadata": {"name": "a" * 49}})


def test_build_crd_is_pure() -> None:
    first = build_crd()
    second = copy.deepcopy(build_crd())
    assert first == second
