"""Job manifests as users write them, shared by the unit and the operator tests.

`refused-children.yaml`: jobs the job model accepts whose children a real API server refuses,
each with the job field the refusal comes from (`REFUSED_CHILDREN`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent

REFUSED_CHILDREN: dict[str, str] = {
    "requests-above-limits": "spec.trainer.resources.requests",
    "bad-toleration-operator": "spec.trainer.template.tolerations[0].operator",
    "toleration-seconds-no-execute": "spec.inference.template.tolerations[0].effect",
    "bad-node-selector-key": "spec.trainer.template.nodeSelector[gpu type]",
    "empty-mount-path": "spec.trainer.template.volumeMounts[0].mountPath",
    "clashing-mount-path": "spec.inference.template.volumeMounts[0].mountPath",
    "label-value-too-long": "spec.trainer.template.labels[experiment]",
    "bad-priority-class": "spec.trainer.template.priorityClassName",
    "gpu-request-over-limit": "spec.inference.resources.requests",
    "fractional-gpu": "spec.trainer.resources.limits[nvidia.com/gpu]",
    "bad-volume-name": "spec.proxy.template.volumes[0].name",
    "affinity-in-without-values": (
        "spec.trainer.template.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].values"
    ),
    "bad-annotation-key": "spec.trainer.template.annotations[prometheus io/scrape]",
}
"""Each job of `refused-children.yaml` and the job field its refusal names."""


def refused_children() -> dict[str, dict[str, Any]]:
    """The jobs of `refused-children.yaml` by name."""
    text = (HERE / "refused-children.yaml").read_text(encoding="utf-8")
    return {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(text) if doc}
