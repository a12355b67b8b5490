"""Server-side printing of a custom resource, as the API server answers `kubectl get` (pure).

`kubectl get` asks for a `Table` (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io, ...`)
and prints the columns the server chose; for a custom resource those are the CRD's
`additionalPrinterColumns`, evaluated by the apiextensions-apiserver
(`pkg/registry/customresource/tableconvertor/tableconvertor.go`, `ConvertToTable`):

- the first column is `Name` (type `string`, format `name`), then one per printer column with
  its name, type, format, description (or `Custom resource definition column (in JSONPath
  format): <path>` when it has none) and priority;
- a cell is the value at the column's JSONPath, missing keys allowed: absent is `null`; a
  `string` column prints the value as text, `integer`, `number` and `boolean` columns keep a
  value of their type (`cellForJSONValue`: a float in an `integer` column is truncated, an int
  in a `number` one becomes a float, any other value is `null`), a `date` column is the time
  since the RFC 3339 timestamp (`ConvertToHumanReadableDateType`, `ShortHumanDuration`), or
  `<invalid>`;
- each row carries its object's metadata as a `PartialObjectMetadata` (the server's default,
  `includeObject=Metadata`).

Only simple paths (`.status.evaluation.latest.passAt1`) are evaluated here; the project's CRD
uses no other kind, and `printer_columns` refuses one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from dressage.api.crd import build_crd

Obj = dict[str, Any]

NAME_DESCRIPTION = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
"""The `Name` column's description: `metav1.ObjectMeta`'s swagger doc of `name`."""
SIMPLE_PATH = re.compile(r"^(\.[A-Za-z_][A-Za-z0-9_-]*)+$")


def table_requested(accept: str) -> bool:
    """Whether a request's `Accept` header asks for a `meta.k8s.io` Table."""
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in accept.split(","))


def printer_columns(crd: Mapping[str, Any] | None = None) -> list[Obj]:
    """The served version's `additionalPrinterColumns` of a CRD (this project's by default)."""
    crd = build_crd() if crd is None else crd
    (version,) = [v for v in crd["spec"]["versions"] if v.get("served", True)]
    columns: list[Obj] = list(version.get("additionalPrinterColumns") or [])
    for column in columns:
        if not SIMPLE_PATH.match(column["jsonPath"]):
            raise ValueError(f"unrecognized column definition {column['jsonPath']!r}")
    return columns


def _find(obj: Mapping[str, Any], path: str) -> Any:
    node: Any = obj
    for key in path.strip(".").split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def short_human_duration(seconds: float) -> str:
    """`ShortHumanDuration` of k8s.io/apimachinery `util/duration`."""
    if seconds < -1:
        return "<invalid>"
    if seconds < 0:
        return "0s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m"
    if whole < 24 * 3600:
        return f"{whole // 3600}h"
    if whole < 365 * 24 * 3600:
        return f"{whole // (24 * 3600)}d"
    return f"{whole // (365 * 24 * 3600)}y"


def _text(value: Any) -> str:
    """The value as client-go's JSONPath printer writes it (`fmt.Fprint`, JSON for objects)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def cell(column_type: str, value: Any, now: datetime) -> Any:
    """One cell of a printer column (`cellForJSONValue`, and the text of a `string` one)."""
    if value is None:
        return None
    if column_type == "string":
        return _text(value)
    if column_type == "integer" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    if column_type == "number" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if column_type == "boolean" and isinstance(value, bool):
        return value
    if column_type == "date" and isinstance(value, str):
        try:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return "<invalid>"
        return short_human_duration((now - stamp).total_seconds())
    return None


def to_table(
    columns: list[Obj], objects: Iterable[Mapping[str, Any]], resource_version: str, now: datetime
) -> Obj:
    """The `Table` the API server answers for these objects."""
    name = {"name": "Name", "type": "string", "format": "name", "priority": 0}
    definitions = [{**name, "description": NAME_DESCRIPTION}]
    for column in columns:
        definitions.append(
            {
                "name": column["name"],
                "type": column["type"],
                "format": column.get("format", ""),
                "description": column.get("description")
                or f"Custom resource definition column (in JSONPath format): {column['jsonPath']}",
                "priority": column.get("priority", 0),
            }
        )
    rows = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        cells = [meta.get("name", "")]
        cells += [cell(c["type"], _find(obj, c["jsonPath"]), now) for c in columns]
        partial = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1"}
        rows.append({"cells": cells, "object": {**partial, "metadata": meta}})
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": resource_version},
        "columnDefinitions": definitions,
        "rows": rows,
    }
