"""Where a job's pods queue and how they rank on a shared cluster (`spec.scheduling`).

`queueName` names a Kueue LocalQueue in the job's namespace; `priorityClassName` a
Kubernetes PriorityClass. The operator's builders put them on the pods
(`dressage_operator.children.scheduling` says how, with Kueue's own words); the job model
only checks their syntax, as the API server would for the label value and the pod field.
"""

from __future__ import annotations

from pydantic import Field

from dressage.api.base import ApiModel

LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
"""A Kubernetes label value (apimachinery `IsValidLabelValue`): at most 63 characters."""
DNS_SUBDOMAIN_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""A DNS-1123 subdomain (apimachinery `IsDNS1123Subdomain`): at most 253 characters."""


class SchedulingSpec(ApiModel):
    """Queueing and priority of every pod of the job on a shared cluster."""

    queue_name: str | None = Field(
        default=None, min_length=1, max_length=63, pattern=LABEL_VALUE_PATTERN
    )
    """A Kueue LocalQueue of the job's namespace. Every pod gets Kueue's
    `kueue.x-k8s.io/queue-name` label; the trainer pods are one Kueue pod group, admitted as
    a unit (a new group for each gang restart), the engines and the proxy are admitted one
    pod at a time. Unset: the pods are not queued."""
    priority_class_name: str | None = Field(
        default=None, min_length=1, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN
    )
    """The PriorityClass of every pod of the job (a role's `template.priorityClassName`
    takes precedence for that role). Kueue orders and preempts workloads by it too."""
