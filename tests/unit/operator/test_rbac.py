"""The operator's RBAC rules: valid and least-privilege."""

from __future__ import annotations

import kubernetes_validate
from dressage_operator.rbac import CLUSTER_RULES, cluster_role

from .children.support import K8S_VERSION, OWNER


def test_rbac_rules_are_valid_and_least_privilege() -> None:
    kubernetes_validate.validate(cluster_role(), K8S_VERSION, strict=True)
    verbs: dict[tuple[str, str], set[str]] = {}
    for r in CLUSTER_RULES:
        for group in r["apiGroups"]:
            for res in r["resources"]:
                verbs.setdefault((group, res), set()).update(r["verbs"])
    # The only update: on the jobs' finalizers, which setting blockOwnerDeletion on the
    # children's owner references requires.
    assert [key for key, v in verbs.items() if "update" in v] == [
        ("dressage.io", "asyncrljobs/finalizers")
    ]
    assert OWNER.reference()["blockOwnerDeletion"] is True
    assert verbs[("", "pods")] == {"get", "list", "watch", "create", "delete"}
    assert "*" not in str(CLUSTER_RULES)
