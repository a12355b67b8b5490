"""The operator's least-privilege RBAC rules, listed once.

The Helm chart renders its ClusterRole from `CLUSTER_RULES` (a test keeps them in step), and
`python -m dressage_operator.rbac` prints them as YAML.
"""

from __future__ import annotations

import sys
from typing import Any, Final

import yaml

from dressage.api.job import API_GROUP, PLURAL

Rule = dict[str, list[str]]

CLUSTER_RULES: Final[list[Rule]] = [
    # The custom resource: watched by kopf, status written by the reconciler, deleted by TTL,
    # patched by kopf for its finalizer and progress annotations.
    {
        "apiGroups": [API_GROUP],
        "resources": [PLURAL],
        "verbs": ["get", "list", "watch", "patch", "delete"],
    },
    {"apiGroups": [API_GROUP], "resources": [f"{PLURAL}/status"], "verbs": ["get", "patch"]},
    # The engines' autoscaler writes the engine count as `kubectl scale` does.
    {"apiGroups": [API_GROUP], "resources": [f"{PLURAL}/scale"], "verbs": ["get", "patch"]},
    # Children carry owner references with `blockOwnerDeletion: true` (children.Owner); with
    # the OwnerReferencesPermissionEnforcement admission plugin only whoever may update the
    # owner's finalizers may set that.
    {"apiGroups": [API_GROUP], "resources": [f"{PLURAL}/finalizers"], "verbs": ["update"]},
    # Children: trainer and engine pods (created, replaced, deleted on suspend and restart).
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["get", "list", "watch", "create", "delete"],
    },
    {
        "apiGroups": [""],
        "resources": ["services", "configmaps"],
        "verbs": ["get", "create", "patch", "delete"],
    },
    {
        "apiGroups": ["apps"],
        "resources": ["deployments"],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    # The per-job NetworkPolicy of engines and proxy (when the chart's networkPolicy.enabled).
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["networkpolicies"],
        "verbs": ["get", "create", "patch", "delete"],
    },
    # Events about jobs (kopf posting and phase transitions).
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    # kopf discovers the API and, cluster-wide, the namespaces it serves.
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
]


def cluster_role(name: str = "dressage-operator") -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [dict(r) for r in CLUSTER_RULES],
    }


def main() -> int:
    sys.stdout.write(yaml.safe_dump(cluster_role(), sort_keys=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
