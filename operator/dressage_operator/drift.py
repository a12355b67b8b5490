"""Drift of a live child from what the operator renders for it (pure).

A child edited or scaled by hand keeps the operator's hash annotation, so the annotation alone
cannot show drift: the fields the operator renders are compared with the live object. Only what
the operator writes is compared (fields the API server or other controllers add, such as
defaults, `clusterIP`, extra labels or annotations, are not), empty values match absent ones
(the API server omits them), and quantities compare by value (`1000m` is `1`), so the operator
never fights the API server over a defaulted or normalised field. A ConfigMap's `data` is
compared exactly: a key added by hand is drift too. Lists of named elements (containers, env,
volumes, ports) are matched by name: an element someone else adds is not drift, a changed or
missing one is.
"""

from __future__ import annotations

from typing import Any

from dressage_operator.quantity import parse_quantity

Obj = dict[str, Any]


def empty(value: Any) -> bool:
    """Whether the API server drops `value` when it serializes an object (`omitempty`): an
    empty map, list or string, false, or null. Absent in the live object means the same."""
    return value is None or value is False or (isinstance(value, str | dict | list) and not value)


def _same_scalar(want: Any, have: Any) -> bool:
    if want == have and type(want) is type(have):
        return True
    if isinstance(want, int | float) and isinstance(have, int | float):
        return not isinstance(want, bool) and not isinstance(have, bool) and want == have
    if isinstance(want, str) and isinstance(have, str):
        a, b = parse_quantity(want), parse_quantity(have)
        return a is not None and a == b
    return False


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def differences(want: Any, have: Any, path: str = "") -> list[str]:
    """The paths (`spec.replicas`, `spec.ports[0].port`) where `have` lacks or contradicts
    what `want` says; empty when `have` carries all of `want`."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return [] if empty(want) and empty(have) else [path or "."]
        found: list[str] = []
        for key, value in want.items():
            sub = f"{path}.{key}" if path else str(key)
            if key not in have:
                if not empty(value):
                    found.append(sub)
                continue
            found += differences(value, have[key], sub)
        return found
    if isinstance(want, list):
        if not isinstance(have, list):
            return [] if empty(want) and empty(have) else [path]
        if _named(want) and _named(have):
            # Containers, env, volumes, ports: matched by name, so an element others add
            # (a sidecar or env var a mutating webhook injects) is not drift.
            by_name = {item["name"]: item for item in have}
            found = []
            for item in want:
                sub = f"{path}[{item['name']}]"
                if item["name"] not in by_name:
                    found.append(sub)
                else:
                    found += differences(item, by_name[item["name"]], sub)
            return found
        if len(want) != len(have):
            return [path]
        found = []
        for i, (w, h) in enumerate(zip(want, have, strict=True)):
            found += differences(w, h, f"{path}[{i}]")
        return found
    if empty(want) and empty(have):
        return []
    return [] if _same_scalar(want, have) else [path]


def drift(desired: Obj, live: Obj) -> list[str]:
    """Where a live child differs from its desired form: `metadata` labels, annotations and
    owner references, and everything else the operator renders (not `status`)."""
    found: list[str] = []
    meta_want, meta_have = desired.get("metadata") or {}, live.get("metadata") or {}
    for key in ("labels", "annotations", "ownerReferences"):
        if key in meta_want:
            found += differences(meta_want[key], meta_have.get(key), f"metadata.{key}")
    for key, value in desired.items():
        if key in ("metadata", "status", "apiVersion", "kind"):
            continue
        found += differences(value, live.get(key), key)
    if desired.get("kind") == "ConfigMap":
        extra = sorted(set(live.get("data") or {}) - set(desired.get("data") or {}))
        found += [f"data.{key}" for key in extra]
    return found


def correction(desired: Obj, live: Obj) -> Obj:
    """The merge patch that sets a drifted child back: the desired object, plus the removal
    of ConfigMap keys added by hand."""
    patch = {k: v for k, v in desired.items() if k != "status"}
    if desired.get("kind") == "ConfigMap":
        extra = set(live.get("data") or {}) - set(desired.get("data") or {})
        if extra:
            patch["data"] = {**(desired.get("data") or {}), **dict.fromkeys(extra)}
    return patch
