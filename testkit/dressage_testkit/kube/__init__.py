"""A Kubernetes API emulation for the operator's tests and benchmarks (needs the `dev` extra).

`emulator` runs kmock on a real loopback port with the metadata an API server fills in;
`refusals` holds the subset of the API server's validation and of the Pod Security admission
that the emulation enforces (pure functions of an object).
"""

from dressage_operator.quantity import parse_quantity

from dressage_testkit.kube.emulator import (
    RESOURCES,
    VERBS,
    DressageKube,
    EmulatedCluster,
    emulated_cluster,
    operator_env,
    restore_env,
    set_env,
)
from dressage_testkit.kube.refusals import (
    ENFORCE_LABEL,
    QUANTITY_MESSAGE,
    RESTRICTED_VOLUME_TYPES,
    BadRequest,
    Cause,
    pod_spec_refusals,
    quota_refusal,
    refusals,
    restricted_violations,
)

__all__ = [
    "ENFORCE_LABEL",
    "QUANTITY_MESSAGE",
    "RESOURCES",
    "RESTRICTED_VOLUME_TYPES",
    "VERBS",
    "BadRequest",
    "Cause",
    "DressageKube",
    "EmulatedCluster",
    "emulated_cluster",
    "operator_env",
    "parse_quantity",
    "pod_spec_refusals",
    "quota_refusal",
    "refusals",
    "restore_env",
    "restricted_violations",
    "set_env",
]
