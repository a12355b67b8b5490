"""A job's children, rendered and checked as the API server would check them, before any is
created (pure).

The job model passes some Kubernetes fields through as they are (tolerations, affinity,
volumes, mounts, template labels and annotations) and the operator merges others with its own
(resources with the GPU count, mounts beside the job's storage). What the API server would
refuse is found here first, so a job that cannot run is `SpecValid=False` naming the job's
field before anything exists, instead of a child refused after its siblings were created.

Each role's first pod (its pods differ only by index) and the proxy Deployment are checked
against (the ConfigMap, the Services and the NetworkPolicy carry nothing of the job's but its
labels, which the API server checked on the job itself)
- the strict Kubernetes JSON schemas of the cluster's release (`dressage_operator.schemas`,
  from `kubernetes-validate`, offline), for the parts the job passes through as it gives them
  (each toleration, the affinity, each volume and volume mount, checked against their
  definitions: the rest of a child is typed by the job model or the operator's own, and the
  tests check the operator's rendering against the whole schemas): a field the schema does
  not know (a typo deep in an affinity) or of the wrong type; the API server would drop an
  unknown field, so the pod would run without it;
- the API server's validation rules for the fields a job sets (`dressage_operator.apirules`).

Every problem is reported against the job field it comes from
(`spec.trainer.template.tolerations[0].operator`), found by where the operator put that field
in the child; one it cannot trace is reported against the child's own field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dressage.api.job import AsyncRLJob, PodTemplateOverrides, ResourceRequirements
from dressage_operator import children, naming, schemas
from dressage_operator.apirules import Key, Path, PathPart, format_path, object_causes
from dressage_operator.children import Obj, Owner
from dressage_operator.config import OperatorConfig

DEFAULT_SCHEMA_RELEASE = "1.33"
"""The Kubernetes release whose schemas check the children when the API server's is unknown."""
_MAP_FIELDS = frozenset(
    {"labels", "annotations", "nodeSelector", "requests", "limits", "matchLabels", "data"}
)
_ROLE_SPEC = {
    naming.ROLE_TRAINER: "trainer",
    naming.ROLE_INFERENCE: "inference",
    naming.ROLE_PROXY: "proxy",
}
_GPU_FIELD = {"trainer": "gpusPerNode", "inference": "tensorParallelSize"}


def rendered_children(job: AsyncRLJob, owner: Owner, config: OperatorConfig) -> list[Obj]:
    """The children that carry the job's fields, one of each shape: the first trainer pod,
    the first engine pod (a role's pods differ only by index) and the proxy Deployment. The
    ConfigMap, the Services and the NetworkPolicy carry none but the job's labels, which the
    API server checked on the job itself."""
    return [
        children.build_trainer_pods(job, owner, config, 0)[0],
        children.build_engine_pod(job, owner, config, 0, ""),
        children.build_proxy_deployment(job, owner, config),
    ]


def _free_form(obj: Obj) -> list[tuple[Path, str, Any]]:
    """The parts of a child the job passes through as it gives them (the model takes them as
    free-form objects): `(path, definition, value)` for each toleration, the affinity, each
    volume and each volume mount. Everything else in a child is typed by the job model or the
    operator's own (its rendering is checked against the whole strict schemas by its tests)."""
    if obj["kind"] == "Deployment":
        base: Path = ("spec", "template", "spec")
        spec = obj["spec"]["template"].get("spec") or {}
    else:
        base, spec = ("spec",), obj.get("spec") or {}
    parts: list[tuple[Path, str, Any]] = []
    parts += [
        ((*base, "tolerations", i), "Toleration", t)
        for i, t in enumerate(spec.get("tolerations") or [])
    ]
    if spec.get("affinity") is not None:
        parts.append(((*base, "affinity"), "Affinity", spec["affinity"]))
    parts += [((*base, "volumes", i), "Volume", v) for i, v in enumerate(spec.get("volumes") or [])]
    for key in ("initContainers", "containers"):
        for c, container in enumerate(spec.get(key) or []):
            mounts = container.get("volumeMounts") or []
            parts += [
                ((*base, key, c, "volumeMounts", j), "VolumeMount", m) for j, m in enumerate(mounts)
            ]
    return parts


def schema_problems(obj: Obj, release: str) -> list[tuple[Path, str]]:
    """What the strict schemas of `release` find in the parts of a child the job passes
    through (`_free_form`), at their paths in the child."""
    found = []
    for at, definition, value in _free_form(obj):
        for raw, message in schemas.problems(value, release, kind=definition):
            path: list[PathPart] = list(at)
            for part in raw:
                path.append(Key(str(part)) if path and path[-1] in _MAP_FIELDS else part)
            found.append((tuple(path), message))
    return found


class _Origin:
    """Where in the job a field of one rendered child comes from: the job's labels, or the
    role's (`spec.trainer`, `spec.inference`, `spec.proxy`) template, resources, image or GPU
    count. The operator places the job's list items (volumes, mounts, env) beside its own, so
    those are found by value."""

    def __init__(self, job: AsyncRLJob, obj: Obj) -> None:
        self.job = job
        self.kind = obj["kind"]
        labels = obj["metadata"].get("labels") or {}
        self.role = _ROLE_SPEC.get(labels.get(naming.LABEL_ROLE, ""))
        self.meta: Obj = obj["metadata"]
        self.pod_spec: Obj = obj.get("spec") or {} if self.kind == "Pod" else {}
        if self.kind == "Deployment":
            template = obj["spec"]["template"]
            self.pod_spec, self.meta = template.get("spec") or {}, template["metadata"]
        self.spec: Any = getattr(job.spec, self.role) if self.role else None
        self.base = f"spec.{self.role}"
        self.template: PodTemplateOverrides | None = self.spec.template if self.spec else None

    def job_field(self, path: Path) -> str | None:
        if self.kind == "Deployment" and path[:2] == ("spec", "template"):
            path = path[2:]
        if path[:1] == ("metadata",):
            return self._meta(path[1:])
        if path[:1] == ("spec",) and self.kind in ("Pod", "Deployment") and self.spec:
            return self._pod(path[1:])
        return None

    def _meta(self, path: Path) -> str | None:
        if len(path) < 2 or not isinstance(path[1], Key):
            return None
        key, rest = path[1].name, _suffix(path[1:])
        if path[0] == "labels" and key in self.job.metadata.labels:
            return f"metadata.labels{rest}"
        if self.template is not None and key in getattr(self.template, str(path[0]), {}):
            return f"{self.base}.template.{path[0]}{rest}"
        return None

    def _pod(self, path: Path) -> str | None:
        assert self.template is not None
        template = f"{self.base}.template"
        head = path[0] if path else ""
        if head in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
            return f"{template}.{format_path(path)}"
        if head == "imagePullSecrets":
            return f"{template}.{format_path(path)}"
        if head == "securityContext":
            return f"{template}.security"
        if head == "volumes" and len(path) > 1 and isinstance(path[1], int):
            rendered = self.pod_spec.get("volumes") or []
            return _listed(path, rendered, self.template.volumes, f"{template}.volumes")
        if head in ("containers", "initContainers") and len(path) > 2:
            return self._container(str(head), path[1:])
        return None

    def _container(self, key: str, path: Path) -> str | None:
        assert self.template is not None
        index, field = path[0], path[1]
        containers = self.pod_spec.get(key) or []
        if not isinstance(index, int) or index >= len(containers):
            return None
        container, main = containers[index], key == "containers" and index == 0
        template = f"{self.base}.template"
        if field == "image":
            # Init containers run the trainer's image (model staging, packages).
            owner = self.base if main else "spec.trainer"
            image = self.spec.image if main else self.job.spec.trainer.image
            return f"{owner}.image" if image else None
        if field == "resources":
            # An init container takes the main container's (`init_container_resources`).
            return self._resources(path[2:])
        if not main:
            return None
        if field == "volumeMounts":
            mounts = self.template.volume_mounts
            return _listed(
                path[1:], container.get("volumeMounts") or [], mounts, f"{template}.volumeMounts"
            )
        if field == "env":
            env = [{"name": e.name, "value": e.value} for e in self.template.env]
            return _listed(path[1:], container.get("env") or [], env, f"{template}.env")
        if field == "securityContext":
            return f"{template}.security"
        return None

    def _resources(self, path: Path) -> str | None:
        resources: ResourceRequirements = self.spec.resources
        base = f"{self.base}.resources"
        if len(path) < 2 or not isinstance(path[1], Key):
            return f"{base}.{format_path(path)}" if path else base
        kind, name = str(path[0]), path[1].name
        if name in (resources.requests if kind == "requests" else resources.limits):
            return f"{base}.{kind}[{name}]"
        if name in resources.limits:  # a request the operator copied from the limit
            return f"{base}.limits[{name}]"
        if name == children.GPU_RESOURCE and self.role in _GPU_FIELD:
            return f"{self.base}.{_GPU_FIELD[self.role]}"
        return None


def _listed(path: Path, rendered: Sequence[Any], mine: Sequence[Any], field: str) -> str | None:
    """`field[k]...` for the item at `path[1]` of a child's list, the `k`-th item of the job's
    list `mine` (matched by value: the operator's items come first, so the last equal ones
    of the child's list are the job's); None when it is the operator's own."""
    position = path[1] if len(path) > 1 else None
    if not isinstance(position, int) or position >= len(rendered):
        return None
    item = rendered[position]
    matches = [i for i, x in enumerate(mine) if x == item]
    if not matches:
        return None
    equal_before = sum(1 for x in rendered[:position] if x == item)
    operators = sum(1 for x in rendered if x == item) - len(matches)
    k = matches[min(max(0, equal_before - operators), len(matches) - 1)]
    return f"{field}[{k}]{_suffix(path[2:])}"


def _suffix(path: Path) -> str:
    """`path` as it continues a field path: `.name`, `[0]`, `[key]`."""
    return "".join(f".{p}" if isinstance(p, str) else format_path((p,)) for p in path)


def child_errors(
    job: AsyncRLJob, owner: Owner, config: OperatorConfig, release: str = DEFAULT_SCHEMA_RELEASE
) -> list[tuple[str, str]]:
    """`(field, message)` for every problem the API server would find in the job's children,
    the field being the job's where the problem comes from it."""
    errors: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for obj in rendered_children(job, owner, config):
        name = f"{obj['kind']} {obj['metadata']['name']}"
        schema = f"checked against the Kubernetes {release} schema of {name}"
        problems = [(p, f"{m} ({schema})") for p, m in schema_problems(obj, release)]
        problems += [
            (c.path, f"{c.message} (the API server would refuse {name})")
            for c in object_causes(obj)
        ]
        origin = _Origin(job, obj)
        for path, message in problems:
            field = origin.job_field(path)
            if field is None:
                field = f"{name} {format_path(path) or '<root>'}"
            if (field, message) in seen:
                continue
            seen.add((field, message))
            errors.append((field, message))
    return errors


def self_check(release: str = DEFAULT_SCHEMA_RELEASE) -> None:
    """Check a valid job's children and a job with a bad toleration as the operator does: run
    where the operator is installed (its image's build does), it shows that the schemas load
    offline and that the checks find what they should. Raises `RuntimeError` otherwise."""
    manifest: dict[str, Any] = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "self-check"},
        "spec": {
            "model": {"source": "org/model"},
            "storage": {"persistentVolumeClaim": "shared"},
        },
    }
    owner = Owner(name="self-check", namespace="default", uid="self-check")
    config = OperatorConfig(network_policies=True)
    found = child_errors(AsyncRLJob.model_validate(manifest), owner, config, release)
    if found:
        raise RuntimeError(f"a valid job's children fail the checks: {found}")
    template = {"tolerations": [{"key": "gpu", "operator": "Equals", "valu": "x"}]}
    manifest["spec"]["trainer"] = {"template": template}
    fields = {f for f, _ in child_errors(AsyncRLJob.model_validate(manifest), owner, config)}
    wanted = {
        "spec.trainer.template.tolerations[0].operator",
        "spec.trainer.template.tolerations[0].valu",
    }
    if not wanted <= fields:
        raise RuntimeError(f"the checks miss a bad toleration: found {sorted(fields)}")
