"""Generate the `asyncrljobs.dressage.io` CustomResourceDefinition from the job model.

The CRD is never edited by hand: `python -m dressage_operator.crdgen` (or
`scripts/gen-crds.sh`) writes `crds/dressage.io_asyncrljobs.yaml` from `AsyncRLJobSpec` and
`AsyncRLJobStatus`, and a test regenerates it and fails on a diff.

pydantic emits JSON Schema 2020-12; Kubernetes wants a *structural* OpenAPI v3 schema. The
translation inlines every `$ref`, turns `anyOf [X, null]` into `X` with `nullable: true`, turns
numeric `exclusiveMinimum: x` into `minimum: x` + `exclusiveMinimum: true`, drops titles and
`additionalProperties: false` (the API server prunes unknown fields instead), marks free-form
objects with `x-kubernetes-preserve-unknown-fields`, and gives optional sub-objects a `{}`
default so that their own field defaults apply. Cross-field and immutability rules that JSON
Schema cannot express are added as CEL `x-kubernetes-validations`.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from dressage.api.figures import figure
from dressage.api.job import (
    API_GROUP,
    API_VERSION,
    KIND,
    MAX_PROXY_REPLICAS,
    PLURAL,
    AsyncRLJobSpec,
)
from dressage.api.status import AsyncRLJobStatus

CRD_NAME = f"{PLURAL}.{API_GROUP}"
CRD_FILE = f"{API_GROUP}_{PLURAL}.yaml"
"""File name of the CRD under `crds/` (the chart copies it under the same name)."""
SHORT_NAMES = ["arj"]
CATEGORIES = ["dressage"]
MAX_JOB_NAME_LENGTH = 48
"""Child names append up to 15 characters (`-trainer-NNN`, `-engine-NNN`) to the job name and
some of them are DNS labels (63 characters at most)."""

Schema = dict[str, Any]

# Rules on `spec` that involve several fields. Each mirrors a check of the pydantic model, so
# the API server refuses what the operator would refuse anyway.
SPEC_RULES: list[Schema] = [
    {
        "rule": (
            "!has(self.staleness) || !has(self.staleness.maxPartialRolloutPreempts)"
            " || (has(self.rollout) && has(self.rollout.mode)"
            " && self.rollout.mode == 'partial_async')"
            " || (has(self.proxy) && has(self.proxy.partialRollout)"
            " && self.proxy.partialRollout)"
        ),
        "message": (
            "staleness.maxPartialRolloutPreempts needs partial rollout: set rollout.mode to "
            "'partial_async' or proxy.partialRollout to true"
        ),
        "fieldPath": ".staleness.maxPartialRolloutPreempts",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": (
            "!has(self.task) || !has(self.task.agent) || self.task.agent != 'blackbox'"
            " || (has(self.task.agentCommand) && size(self.task.agentCommand) > 0)"
        ),
        "message": "task.agentCommand is required when task.agent is 'blackbox'",
        "fieldPath": ".task.agentCommand",
        "reason": "FieldValueRequired",
    },
]

# Transition rules: fields that cannot change once the job exists.
MODEL_RULES: list[Schema] = [
    {
        "rule": (
            "self.source == oldSelf.source"
            " && has(self.revision) == has(oldSelf.revision)"
            " && (!has(self.revision) || self.revision == oldSelf.revision)"
        ),
        "message": (
            "model.source and model.revision are immutable: the checkpoints of a job belong "
            "to one model"
        ),
        "fieldPath": ".source",
    },
]
STORAGE_RULES: list[Schema] = [
    {
        "rule": (
            "has(self.persistentVolumeClaim) == has(oldSelf.persistentVolumeClaim)"
            " && (!has(self.persistentVolumeClaim)"
            " || self.persistentVolumeClaim == oldSelf.persistentVolumeClaim)"
        ),
        "message": "storage.persistentVolumeClaim is immutable: checkpoints live there",
        "fieldPath": ".persistentVolumeClaim",
    },
]
PROXY_RULES: list[Schema] = [
    {
        "rule": f"!has(self.replicas) || self.replicas <= {MAX_PROXY_REPLICAS}",
        "message": (
            f"proxy.replicas: at most {MAX_PROXY_REPLICAS} is supported: every replica pauses "
            "and drains every engine"
        ),
        "fieldPath": ".replicas",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": (
            "has(self.tokenSecret) == has(oldSelf.tokenSecret)"
            " && (!has(self.tokenSecret) || self.tokenSecret == oldSelf.tokenSecret)"
        ),
        "message": (
            "proxy.tokenSecret is immutable: the running trainer pods send the token they "
            "started with"
        ),
        "fieldPath": ".tokenSecret",
    },
]
INFERENCE_RULES: list[Schema] = [
    {
        "rule": (
            "!has(self.autoscaling) || self.autoscaling.minReplicas <= self.autoscaling.maxReplicas"
        ),
        "message": "inference.autoscaling.minReplicas must not be above maxReplicas",
        "fieldPath": ".autoscaling.minReplicas",
        "reason": "FieldValueInvalid",
    },
    {
        # A transition rule (it reads oldSelf): checked on updates only, so a new job may
        # start outside the bounds (the operator brings it in); `kubectl scale`, which writes
        # this field through the scale subresource, is refused outside them.
        "rule": (
            "!has(self.autoscaling) || self.replicas == oldSelf.replicas"
            " || (self.replicas >= self.autoscaling.minReplicas"
            " && self.replicas <= self.autoscaling.maxReplicas)"
        ),
        "message": (
            "inference.replicas is the autoscaler's while inference.autoscaling is set: a "
            "new value must be within [autoscaling.minReplicas, autoscaling.maxReplicas]; "
            "change the bounds, or remove inference.autoscaling to set it by hand"
        ),
        "fieldPath": ".replicas",
        "reason": "FieldValueForbidden",
    },
]
EMBEDDED = "has(self.engine) && self.engine == 'embedded'"
INFERENCE_RULES += [
    {
        "rule": f"!({EMBEDDED}) || !has(self.tensorParallelSize) || self.tensorParallelSize == 1",
        "message": (
            "inference.tensorParallelSize must be 1 with engine 'embedded': the embedded "
            "engine is one CPU process"
        ),
        "fieldPath": ".tensorParallelSize",
        "reason": "FieldValueForbidden",
    },
    {
        "rule": f"!({EMBEDDED}) || !has(self.extraArgs) || size(self.extraArgs) == 0",
        "message": (
            "inference.extraArgs are SGLang server arguments: not accepted with engine 'embedded'"
        ),
        "fieldPath": ".extraArgs",
        "reason": "FieldValueForbidden",
    },
]
SCALE_SUBRESOURCE: Schema = {
    "specReplicasPath": ".spec.inference.replicas",
    "statusReplicasPath": ".status.inference.replicas",
    "labelSelectorPath": ".status.inference.selector",
}
"""The scale subresource (`kubectl scale arj/NAME`, a HorizontalPodAutoscaler, KEDA): the
engine count, the engine pods that exist and their label selector."""
TRAINING_RULES: list[Schema] = [
    {
        "rule": (
            "!has(self.optimizerCheckpointEvery) || self.optimizerCheckpointEvery"
            " % (has(self.checkpointEvery) ? self.checkpointEvery : 1) == 0"
        ),
        "message": (
            "training.optimizerCheckpointEvery must be a multiple of training.checkpointEvery: "
            "the optimizer state is written with a checkpoint"
        ),
        "fieldPath": ".optimizerCheckpointEvery",
        "reason": "FieldValueInvalid",
    },
]
ROOT_RULES: list[Schema] = [
    {
        "rule": (
            f"size(self.metadata.name) <= {MAX_JOB_NAME_LENGTH}"
            " && self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')"
        ),
        "message": (
            f"metadata.name must be a DNS-1035 label of at most {MAX_JOB_NAME_LENGTH} "
            "characters: child Services and pod hostnames are named after it"
        ),
    },
]

PRINTER_COLUMNS: list[Schema] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Step", "type": "integer", "jsonPath": ".status.staleness.step"},
    {
        "name": "Weight Version",
        "type": "string",
        "jsonPath": ".status.staleness.weightVersion",
    },
    {
        "name": "Span Max",
        "type": "number",
        "jsonPath": f".status.staleness.{figure('version_span_max').status_key}",
        "description": "Largest weight-version span of a recent trajectory",
    },
    {
        "name": "Lag Max",
        "type": "number",
        "jsonPath": f".status.staleness.{figure('version_lag_max').status_key}",
        "description": "Most weight versions a sample of the latest batch was behind the trainer",
    },
    {
        "name": "Dropped",
        "type": "integer",
        "jsonPath": f".status.staleness.{figure('dropped_groups').status_key}",
        "description": "GRPO groups dropped by the staleness controls and retries",
    },
    {
        "name": "Eval",
        "type": "number",
        "jsonPath": ".status.evaluation.latest.passAt1",
        "description": "Held-out pass@1 of the latest evaluated weight version",
    },
    {
        "name": "Best",
        "type": "string",
        "jsonPath": ".status.evaluation.best.version",
        "description": "The weight version with the best held-out pass@1 so far",
    },
    {
        "name": "Best Eval",
        "type": "number",
        "jsonPath": ".status.evaluation.best.passAt1",
        "priority": 1,
        "description": "Held-out pass@1 of the best evaluated weight version",
    },
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts", "priority": 1},
    {
        "name": "Engines",
        "type": "integer",
        "jsonPath": ".status.inference.ready",
        "priority": 1,
        "description": "Engine pods ready (spec.inference.replicas is the count asked for)",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Message",
        "type": "string",
        "jsonPath": ".status.message",
        "description": "What the phase is waiting for or why it failed: an invalid field, a "
        "child the API server refused",
    },
]

_DROPPED_KEYS = ("title", "$defs")


def _resolve(schema: Schema, defs: dict[str, Schema]) -> Schema:
    """Inline one `$ref`, keeping the referencing site's own keys (description, default)."""
    if "$ref" not in schema:
        return schema
    name = schema["$ref"].rsplit("/", 1)[-1]
    merged = copy.deepcopy(defs[name])
    merged.update({k: v for k, v in schema.items() if k != "$ref"})
    return merged


_SCALAR_TYPES = frozenset({"integer", "number", "string", "boolean"})


def _scalar_union(
    branches: list[Schema], outer: Schema, nullable: bool, any_of: list[Schema]
) -> Schema:
    """A union of scalar types (`int | float | str`): structural schemas have no such type,
    so the node says only that it is a scalar the job model validates; `int | str` keeps the
    Kubernetes int-or-string marker."""
    types = {b.get("type") for b in branches}
    if not types <= _SCALAR_TYPES or any(set(b) - {"type"} for b in branches):
        raise ValueError(f"cannot express anyOf {any_of} structurally")
    out: Schema = {k: v for k, v in outer.items() if k not in _DROPPED_KEYS}
    if types == {"integer", "string"}:
        out["x-kubernetes-int-or-string"] = True
    else:
        out["x-kubernetes-preserve-unknown-fields"] = True
    if nullable:
        out["nullable"] = True
    return out


def to_structural(schema: Schema, defs: dict[str, Schema]) -> Schema:
    """Translate one pydantic JSON Schema node into a structural OpenAPI v3 node."""
    schema = _resolve(schema, defs)
    if "anyOf" in schema:
        branches = [b for b in schema["anyOf"] if b.get("type") != "null"]
        nullable = len(branches) < len(schema["anyOf"])
        outer = {k: v for k, v in schema.items() if k != "anyOf"}
        if len(branches) > 1:
            return _scalar_union(branches, outer, nullable, schema["anyOf"])
        schema = _resolve(branches[0], defs) | outer
        if nullable:
            schema["nullable"] = True
    out: Schema = {}
    for key, value in schema.items():
        if key in _DROPPED_KEYS:
            continue
        if key == "default" and value is None:
            continue
        if key == "additionalProperties":
            if value is False:
                continue
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
                continue
            out[key] = to_structural(value, defs)
        elif key == "properties":
            out[key] = {name: to_structural(prop, defs) for name, prop in value.items()}
        elif key == "items":
            out[key] = to_structural(value, defs)
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "const":
            out["enum"] = [value]
        elif key == "description":
            out[key] = " ".join(value.split())
        else:
            out[key] = copy.deepcopy(value)
    free_form = "properties" not in out and "additionalProperties" not in out
    if out.get("type") == "object" and free_form:
        out["x-kubernetes-preserve-unknown-fields"] = True
    # An optional sub-object defaults to {} so that its fields' own defaults are applied.
    for name, prop in out.get("properties", {}).items():
        if (
            prop.get("type") == "object"
            and "properties" in prop
            and "default" not in prop
            and not prop.get("required")
            and name not in out.get("required", [])
            and not prop.get("nullable")
        ):
            prop["default"] = {}
    return out


def _structural(model: type[Any]) -> Schema:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return to_structural(raw, raw.get("$defs", {}))


def spec_schema() -> Schema:
    """The structural schema of `.spec`, with its CEL rules."""
    spec = _structural(AsyncRLJobSpec)
    spec["x-kubernetes-validations"] = copy.deepcopy(SPEC_RULES)
    spec["properties"]["model"]["x-kubernetes-validations"] = copy.deepcopy(MODEL_RULES)
    spec["properties"]["storage"]["x-kubernetes-validations"] = copy.deepcopy(STORAGE_RULES)
    spec["properties"]["proxy"]["x-kubernetes-validations"] = copy.deepcopy(PROXY_RULES)
    spec["properties"]["training"]["x-kubernetes-validations"] = copy.deepcopy(TRAINING_RULES)
    spec["properties"]["inference"]["x-kubernetes-validations"] = copy.deepcopy(INFERENCE_RULES)
    return spec


def status_schema() -> Schema:
    """The structural schema of `.status` (written by the operator only)."""
    status = _structural(AsyncRLJobStatus)
    status["properties"]["conditions"].update(
        {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}
    )
    status["properties"]["conditions"]["items"]["required"] = ["type", "status"]
    return status


def build_crd() -> Schema:
    """The complete CustomResourceDefinition object."""
    root: Schema = {
        "type": "object",
        "description": "An asynchronous RL job: trainer gang, SGLang engines and rollout proxy.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
        "x-kubernetes-validations": copy.deepcopy(ROOT_RULES),
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": CRD_NAME,
            "labels": {"app.kubernetes.io/part-of": "dressage"},
        },
        "spec": {
            "group": API_GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": list(SHORT_NAMES),
                "categories": list(CATEGORIES),
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {"status": {}, "scale": copy.deepcopy(SCALE_SUBRESOURCE)},
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),
                }
            ],
        },
    }


HEADER = (
    "# Generated from dressage/api (AsyncRLJobSpec, AsyncRLJobStatus) by\n"
    "# `python -m dressage_operator.crdgen`. Do not edit: change the model and regenerate.\n"
)


def render_crd() -> str:
    """The CRD as the YAML text stored in `crds/`."""
    body = yaml.safe_dump(build_crd(), sort_keys=False, width=100, allow_unicode=True)
    return HEADER + body
