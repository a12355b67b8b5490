"""The scale subresource of a custom resource, as the API server serves it (pure).

What the emulation (`emulator.DressageKube`) answers on `GET`, `PUT` and `PATCH` of
`.../asyncrljobs/NAME/scale`, read from Kubernetes' apiextensions-apiserver
(`pkg/registry/customresource/etcd.go`: `ScaleREST`, `scaleFromCustomResource`,
`scaleUpdatedObjectInfo.UpdatedObject`) and from the CRD this project generates (its
`subresources.scale` paths, its schema and its CEL rules):

- a `Scale` (`autoscaling/v1`) is built from the object: `spec.replicas` from
  `specReplicasPath`, `status.replicas` from `statusReplicasPath` (0 when absent),
  `status.selector` from `labelSelectorPath` ("" when absent), and the object's name,
  namespace, uid, resourceVersion and creationTimestamp. The real server applies the schema's
  defaults when it reads an object, so an absent `specReplicasPath` reads as its default here;
  without one, `GET` is a 500 (`the spec replicas field ... does not exist`);
- an update writes `spec.replicas` into `specReplicasPath` and stores the object through the
  custom resource's own strategy, so the whole object is validated as any update is: here, the
  schema of the node at that path (type, minimum, maximum) and every CEL rule on its ancestors
  (transition rules with the stored object as `oldSelf`), evaluated with a CEL interpreter
  (cel-python) after the schema's defaults are applied, as the API server evaluates them. A
  refusal is a 422 naming the object as `<Kind>.<group> "<name>" is invalid: ...`;
- a `resourceVersion` in the `Scale` is a precondition: a stale one is a 409 Conflict; a body
  that is not a `Scale`, or names another object, is a 400; a patch that is not a JSON merge
  patch, strategic merge patch or JSON patch is a 415.

The emulation checks only the fields the scale subresource writes (the path above and its
ancestors' rules), not the whole object's schema.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy.adapter import json_to_cel

from dressage.api.crd import build_crd

Obj = dict[str, Any]
SCALE_API_VERSION = "autoscaling/v1"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class ScaleError(Exception):
    """The API server's refusal: an HTTP status, a `Status` reason, message and details."""

    status: int
    reason: str
    message: str
    details: Obj = field(default_factory=dict)


@dataclass(frozen=True)
class ScaleSubresource:
    """One CRD's scale subresource: its paths, the schema and the identity of its kind."""

    spec_replicas_path: str
    status_replicas_path: str
    label_selector_path: str
    schema: Obj
    """The CRD's `openAPIV3Schema` (the root of the custom resource)."""
    kind: str
    group: str
    plural: str

    @classmethod
    def of(cls, crd: Obj) -> ScaleSubresource:
        version = crd["spec"]["versions"][0]
        scale = version["subresources"]["scale"]
        return cls(
            spec_replicas_path=scale["specReplicasPath"],
            status_replicas_path=scale["statusReplicasPath"],
            label_selector_path=scale.get("labelSelectorPath", ""),
            schema=version["schema"]["openAPIV3Schema"],
            kind=crd["spec"]["names"]["kind"],
            group=crd["spec"]["group"],
            plural=crd["spec"]["names"]["plural"],
        )

    # --- reading ------------------------------------------------------------------------
    def read(self, obj: Obj) -> Obj:
        """The `Scale` of `obj` (`scaleFromCustomResource`); a 500 when the spec path has no
        value and no default."""
        defaulted = with_defaults(obj, self.schema)
        replicas = _get(defaulted, self.spec_replicas_path)
        if replicas is None:
            raise ScaleError(
                500,
                "InternalError",
                f'Internal error occurred: the spec replicas field "{self.spec_replicas_path}" '
                "does not exist",
            )
        meta = obj.get("metadata") or {}
        identity = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
        return {
            "apiVersion": SCALE_API_VERSION,
            "kind": "Scale",
            "metadata": {k: meta[k] for k in identity if k in meta},
            "spec": {"replicas": replicas},
            "status": {
                "replicas": _get(obj, self.status_replicas_path) or 0,
                "selector": (
                    _get(obj, self.label_selector_path) or "" if self.label_selector_path else ""
                ),
            },
        }

    # --- writing ------------------------------------------------------------------------
    def patched(self, current: Obj, patch: Any, content_type: str) -> Obj:
        """The `Scale` a PATCH of `current` asks for (merge, strategic merge or JSON patch)."""
        media = content_type.split(";")[0].strip()
        if media in (MERGE_PATCH, STRATEGIC_MERGE_PATCH) and isinstance(patch, Mapping):
            merged: Obj = _merge(copy.deepcopy(current), patch)
            return merged
        if media == JSON_PATCH and isinstance(patch, list):
            return _json_patch(copy.deepcopy(current), patch)
        raise ScaleError(
            415,
            "UnsupportedMediaType",
            f"the body of the request was in an unknown format - accepted media types include: "
            f"{JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_MERGE_PATCH}",
        )

    def update(self, obj: Obj, scale: Any, name: str) -> Obj:
        """The object `scale` (a PUT body, or a patched `Scale`) turns `obj` into; raises the
        API server's refusal."""
        if not isinstance(scale, Mapping) or scale.get("kind") != "Scale":
            raise ScaleError(
                400,
                "BadRequest",
                f"the object provided is not a Scale: kind {_kind_of(scale)!r}",
            )
        meta = scale.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise ScaleError(
                400,
                "BadRequest",
                f"the name of the object ({meta['name']}) does not match the name on the URL "
                f"({name})",
            )
        stored = (obj.get("metadata") or {}).get("resourceVersion")
        wanted = meta.get("resourceVersion")
        if wanted and wanted != stored:
            raise ScaleError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {self.plural}.{self.group} "{name}": the '
                "object has been modified; please apply your changes to the latest version and "
                "try again",
                {"name": name, "group": self.group, "kind": self.plural},
            )
        replicas = (scale.get("spec") or {}).get("replicas", 0)
        if isinstance(replicas, bool) or not isinstance(replicas, int):
            raise ScaleError(
                400,
                "BadRequest",
                'Scale in version "v1" cannot be handled as a Scale: json: cannot unmarshal '
                f"{type(replicas).__name__} into Go struct field ScaleSpec.spec.replicas of "
                "type int32",
            )
        new = copy.deepcopy(obj)
        _set(new, self.spec_replicas_path, replicas)
        causes = self.causes(new, obj)
        if causes:
            raise self.invalid(name, causes)
        return new

    # --- validation ---------------------------------------------------------------------
    def causes(self, new: Obj, old: Obj) -> list[Obj]:
        """What the custom resource's validation finds in the fields the scale subresource
        writes: the schema of the replicas node and the CEL rules on its ancestors."""
        parts = _parts(self.spec_replicas_path)
        found: list[Obj] = []
        node = _node(self.schema, parts)
        value = _get(new, self.spec_replicas_path)
        path = ".".join(parts)
        if "minimum" in node and value < node["minimum"]:
            detail = f"{path} in body should be greater than or equal to {node['minimum']}"
            found.append(_cause("FieldValueInvalid", path, f"Invalid value: {value}: {detail}"))
        if "maximum" in node and value > node["maximum"]:
            detail = f"{path} in body should be less than or equal to {node['maximum']}"
            found.append(_cause("FieldValueInvalid", path, f"Invalid value: {value}: {detail}"))
        if found:
            return found
        new_d, old_d = with_defaults(new, self.schema), with_defaults(old, self.schema)
        for depth in range(len(parts)):
            ancestor = parts[:depth]
            for rule in _node(self.schema, ancestor).get("x-kubernetes-validations", []):
                if not _holds(rule["rule"], _at(new_d, ancestor), _at(old_d, ancestor)):
                    found.append(_rule_cause(rule, ancestor))
        return found

    def invalid(self, name: str, causes: list[Obj]) -> ScaleError:
        listed = [f"{c['field']}: {c['message']}" for c in causes]
        text = listed[0] if len(listed) == 1 else "[" + ", ".join(listed) + "]"
        return ScaleError(
            422,
            "Invalid",
            f'{self.kind}.{self.group} "{name}" is invalid: {text}',
            {"name": name, "group": self.group, "kind": self.kind, "causes": causes},
        )


def for_jobs() -> ScaleSubresource:
    """The scale subresource of the `AsyncRLJob` CRD this project generates."""
    return ScaleSubresource.of(build_crd())


def discovery_entries(plural: str, kind: str, namespaced: bool = True) -> list[Obj]:
    """The discovery entries of a CRD's status and scale subresources, as the API server lists
    them (apiextensions-apiserver `customresource_discovery_controller.go`): the scale is an
    `autoscaling/v1` `Scale`, which `kubectl scale` needs to know to decode it."""
    verbs = ["get", "patch", "update"]
    return [
        {
            "name": f"{plural}/status",
            "singularName": "",
            "namespaced": namespaced,
            "kind": kind,
            "verbs": verbs,
        },
        {
            "name": f"{plural}/scale",
            "singularName": "",
            "namespaced": namespaced,
            "group": "autoscaling",
            "version": "v1",
            "kind": "Scale",
            "verbs": verbs,
        },
    ]


# --- helpers ------------------------------------------------------------------------------
def _parts(path: str) -> list[str]:
    return [p for p in path.strip(".").split(".") if p]


def _get(obj: Any, path: str) -> Any:
    node = obj
    for part in _parts(path):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _at(obj: Any, parts: list[str]) -> Any:
    node = obj
    for part in parts:
        node = node.get(part, {}) if isinstance(node, Mapping) else {}
    return node


def _set(obj: Obj, path: str, value: Any) -> None:
    parts = _parts(path)
    node = obj
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


def _node(schema: Obj, parts: list[str]) -> Obj:
    node = schema
    for part in parts:
        node = node.get("properties", {}).get(part, {})
    return node


def with_defaults(value: Any, schema: Obj) -> Any:
    """`value` with the schema's defaults applied, as the API server's structural defaulting
    does: a missing property with a `default` gets it, then its own properties' defaults."""
    if not isinstance(value, Mapping) or "properties" not in schema:
        return copy.deepcopy(value)
    out = {k: copy.deepcopy(v) for k, v in value.items()}
    for key, prop in schema["properties"].items():
        if key not in out and "default" in prop:
            out[key] = copy.deepcopy(prop["default"])
        if key in out:
            out[key] = with_defaults(out[key], prop)
    return out


def _holds(rule: str, value: Any, old: Any) -> bool:
    env = celpy.Environment()
    activation = {"self": json_to_cel(value), "oldSelf": json_to_cel(old)}
    return bool(env.program(env.compile(rule)).evaluate(activation))


def _cause(reason: str, path: str, message: str) -> Obj:
    return {"reason": reason, "message": message, "field": path}


def _rule_cause(rule: Obj, ancestor: list[str]) -> Obj:
    """A failed CEL rule as the API server reports it: at the node plus the rule's
    `fieldPath`; `Forbidden: <message>` for reason FieldValueForbidden, else `Invalid value:
    "object": <message>`."""
    path = ".".join([*ancestor, *_parts(rule.get("fieldPath", ""))])
    reason = rule.get("reason", "FieldValueInvalid")
    message = rule.get("message") or f"failed rule: {rule['rule']}"
    if reason == "FieldValueForbidden":
        return _cause(reason, path, f"Forbidden: {message}")
    return _cause(reason, path, f'Invalid value: "object": {message}')


def _kind_of(value: Any) -> str:
    return str(value.get("kind", "")) if isinstance(value, Mapping) else type(value).__name__


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge(target.get(key), value)
    return target


def _json_patch(target: Obj, ops: list[Any]) -> Obj:
    """RFC 6902 JSON patch: the `add`, `replace`, `remove` and `test` operations."""
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).split("/")[1:]]
        parent: Any = target
        for part in parts[:-1]:
            parent = parent[part]
        leaf = parts[-1]
        kind = op.get("op")
        if kind == "test":
            if parent.get(leaf) != op.get("value"):
                raise ScaleError(
                    422, "Invalid", f"the server rejected our request: test of {op['path']} failed"
                )
        elif kind in ("add", "replace"):
            parent[leaf] = copy.deepcopy(op["value"])
        elif kind == "remove":
            parent.pop(leaf, None)
        else:
            raise ScaleError(400, "BadRequest", f"unsupported JSON patch operation {kind!r}")
    return target
