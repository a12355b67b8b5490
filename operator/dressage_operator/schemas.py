"""The strict JSON schemas of the Kubernetes API, as `kubernetes-validate` ships them (offline).

`kubernetes_validate.validate(obj, version, strict=True)` reads and parses the release's
definitions (several MB of JSON) at every call and reports only the first problem. The
operator checks a job's children at every change of its spec, so this module loads each
kind's schema once per release, from the same files and with the same layout
(`kubernetes-json-schema/v<release>-local-strict/<kind>-<group>-<version>.json` beside
`_definitions.json`, read by `kubernetes_validate.utils.schema_contents`), and reports every
problem. Strict: a field the schema does not know is an error (`additionalProperties: false`),
where the API server would drop it, and the object would run without it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import jsonschema
from kubernetes_validate.utils import latest_version, schema_contents
from referencing import Registry, Resource

Problem = tuple[tuple[str | int, ...], str]
"""The JSON path of a problem in the object, and its message."""

OLDEST_RELEASE = (1, 25)
"""The oldest release `kubernetes-validate` ships schemas for."""


def schema_release(server_version: str | None, default: str) -> str:
    """The schema release (`1.31`) for an API server's version (`v1.31.2`, `1.31.0-gke.1`):
    its minor release, within the releases the package ships; `default` when unknown."""
    match = re.match(r"^v?(\d+)\.(\d+)", server_version or "")
    if match is None:
        return default
    wanted = (int(match.group(1)), int(match.group(2)))
    newest = tuple(int(p) for p in latest_version().split(".")[:2])
    chosen = min(max(wanted, OLDEST_RELEASE), newest)
    return f"{chosen[0]}.{chosen[1]}"


def _api_part(api_version: str) -> str:
    # As kubernetes-validate names its files: `apps/v1` -> `apps-v1`,
    # `networking.k8s.io/v1` -> `networking-v1`, `v1` -> `v1`.
    return re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)


@functools.cache
def _definitions(release: str) -> Resource[Any]:
    directory = f"kubernetes-json-schema/v{release}.0-local-strict"
    return Resource.from_contents(schema_contents(f"{directory}/_definitions.json", release))


@functools.cache
def validator(kind: str, api_version: str, release: str) -> jsonschema.Draft202012Validator:
    """The strict validator of one kind in one release (loaded once)."""
    directory = f"kubernetes-json-schema/v{release}.0-local-strict"
    name = f"{directory}/{kind.lower()}-{_api_part(api_version)}.json"
    schema = schema_contents(name, release)
    registry: Registry[Any] = _definitions(release) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.Draft202012Validator(schema, registry=registry)


def problems(
    obj: Mapping[str, Any], release: str, kind: str | None = None, api_version: str = "v1"
) -> list[Problem]:
    """Every place where `obj` breaks its kind's strict schema in `release`: an object's own
    kind, or `kind` for a part of one (`Toleration`, `Affinity`, `Volume`, ...; the package
    ships a schema per definition)."""
    if kind is None:
        kind, api_version = str(obj["kind"]), str(obj["apiVersion"])
    check = validator(kind, api_version, release)
    found: list[Problem] = []
    for error in check.iter_errors(obj):
        path = tuple(error.absolute_path)
        known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            # One problem per unknown field, at the field: a typo is named where it is.
            found += [
                ((*path, key), f"unknown field {key!r}")
                for key in error.instance
                if key not in known
            ]
        else:
            found.append((path, error.message))
    return sorted(found, key=lambda p: [str(x) for x in p[0]])
