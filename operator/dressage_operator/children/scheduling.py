"""Queueing and priority of a job's pods on a shared cluster (`spec.scheduling`), pure.

The labels and annotations are Kueue's, for plain pods, as its documentation defines them
(kubernetes-sigs/kueue, `site/content/en/docs/tasks/run/plain_pods.md`, "Run Plain Pods"; the
names are those of `pkg/controller/jobs/pod/constants/constants.go`):

- "The target local queue should be specified in the `metadata.labels` section of the Pod
  configuration": `kueue.x-k8s.io/queue-name: <queue>`. Every pod of the job carries it, so
  all of the job's resources count against its queue; Kueue checks that the members of a pod
  group name the same queue (`validatePodGroupMetadata`).
- "In order to run a set of Pods as a single unit, called Pod group, add the
  "pod-group-name" label, and the "pod-group-total-count" annotation to all members of the
  group, consistently": the trainer gang is one pod group, `kueue.x-k8s.io/pod-group-name` on
  every trainer pod, `kueue.x-k8s.io/pod-group-total-count` its size, so Kueue admits the gang
  as a unit (its Workload is named after the group).
- "Kueue does not re-create failed Pods ... When a Kueue needs to preempt a workload that
  represents a Pod group, kueue sends delete requests for all of the Pods in the group. It is
  the responsibility of the user or controller that created the original Pods to create
  replacement Pods." Kueue keeps its finalizer `kueue.x-k8s.io/managed` on a group's pods and
  removes it "when: the group satisfies the termination criteria ...; for Failed Pods, when
  Kueue observes a replacement Pod; you delete the Workload object"
  (`tasks/troubleshooting/troubleshooting_pods.md`), and the termination criteria include:
  "Set the `kueue.x-k8s.io/retriable-in-group: false` annotation on at least one Pod in the
  group ... Kueue will mark the workload as finished once all Pods are terminated."

A gang restart therefore gets a new group, `<job>-gang-<n>` after the gang number
(`status.restarts`): the operator never repairs a gang in place (it deletes the old gang and
creates every pod anew, under the same pod names), so a replacement pod could not exist
beside the failed one it replaces, and Kueue would hold the old pods' finalizers, and with
them their names, forever. Every trainer pod is created `retriable-in-group: "false"`: once
the old gang's pods have all terminated, Kueue finishes its Workload, releases the quota and
the finalizers, and the new gang queues as a new unit. A gang of another size could not join
the old group anyway (its total count must be the same on every member).

Engines and the proxy are not in the gang: engines come and go one by one (replaced, scaled),
and a group's size is fixed. They carry the queue label only, so Kueue admits each as a single
pod (the proxy's Deployment carries it too, for Kueue's Deployment integration): a full queue
holds a new engine back while the job trains with the engines it has.

`priorityClassName` reaches every pod; a role's `template.priorityClassName` wins for that role.
"""

from __future__ import annotations

from typing import Final

from dressage.api.job import AsyncRLJob, PodTemplateOverrides

QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
POD_GROUP_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL_COUNT: Final = "kueue.x-k8s.io/pod-group-total-count"
RETRIABLE_IN_GROUP: Final = "kueue.x-k8s.io/retriable-in-group"
"""With `"false"` on a group member, Kueue finishes the group's Workload once all its pods
have terminated (Kueue's `RetriableInGroupAnnotationValue`)."""


def pod_group_name(job: str, gang: int) -> str:
    """The Kueue pod group (and Workload) of trainer gang `gang`: a new one per restart."""
    return f"{job}-gang-{gang}"


def queue_labels(job: AsyncRLJob) -> dict[str, str]:
    """The queue label of every pod of the job; none when `spec.scheduling.queueName` is
    unset."""
    queue = job.spec.scheduling.queue_name
    return {} if queue is None else {QUEUE_LABEL: queue}


def trainer_group_labels(job: AsyncRLJob, owner_name: str, gang: int) -> dict[str, str]:
    """A trainer pod's Kueue labels: the queue and its gang's pod group."""
    labels = queue_labels(job)
    if labels:
        labels[POD_GROUP_LABEL] = pod_group_name(owner_name, gang)
    return labels


def trainer_group_annotations(job: AsyncRLJob) -> dict[str, str]:
    """A trainer pod's Kueue annotations: the gang's size, and that a gang is never repaired
    in place (see the module docstring)."""
    if job.spec.scheduling.queue_name is None:
        return {}
    return {
        POD_GROUP_TOTAL_COUNT: str(job.spec.trainer.nodes),
        RETRIABLE_IN_GROUP: "false",
    }


def priority_class_name(job: AsyncRLJob, template: PodTemplateOverrides) -> str | None:
    """The PriorityClass of a role's pods: the role's template's, else the job's."""
    return template.priority_class_name or job.spec.scheduling.priority_class_name
