"""Kubernetes primitives of the job model: quantities, env vars, volumes, images, pod overrides.

Each validates what a real API server would refuse (a bad quantity, an env var name Kubernetes
rejects, a hostPath volume) when the manifest is read, so a refusal names the job's field
instead of surfacing later as a child object the API server turns down.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, WithJsonSchema, model_validator
from pydantic.alias_generators import to_snake
from pydantic_core import InitErrorDetails, PydanticCustomError

from dressage.api.base import ApiModel
from dressage.api.images import IMAGE_REFERENCE_PATTERN, image_reference_problem
from dressage.api.reserved import OPERATOR_ENV

ENV_VAR_NAME_PATTERN = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
"""What Kubernetes accepts as an environment variable name (`IsEnvVarName`)."""
QUANTITY_PATTERN = r"^\+?(\d+(\.\d*)?|\.\d+)([KMGTPE]i|[mkMGTPE]|[eE][+-]?\d+)?$"
"""A non-negative Kubernetes resource quantity: `8`, `1.5`, `500m`, `64Gi`, `1e3`."""

_QUANTITY = re.compile(QUANTITY_PATTERN)
_ENV_VAR_NAME = re.compile(ENV_VAR_NAME_PATTERN)


def _quantity(value: str) -> str:
    if not _QUANTITY.match(value):
        raise PydanticCustomError(
            "quantity",
            "{value!r} is not a Kubernetes quantity (a non-negative number with an optional "
            "suffix: 8, 1.5, 500m, 64Gi, 1e3)",
            {"value": value},
        )
    return value


def _env_var_name(name: str) -> str:
    if not _ENV_VAR_NAME.match(name):
        raise PydanticCustomError(
            "env_var_name",
            "{name!r} is not a valid environment variable name: letters, digits, '_', '-' or "
            "'.', not starting with a digit",
            {"name": name},
        )
    if name in OPERATOR_ENV:
        raise PydanticCustomError(
            "env_var_reserved",
            "{name} is set by the operator (rendezvous and wiring of the job's pods) and "
            "cannot be overridden",
            {"name": name},
        )
    return name


Quantity = Annotated[
    str,
    AfterValidator(_quantity),
    WithJsonSchema({"type": "string", "pattern": QUANTITY_PATTERN}),
]
EnvVarName = Annotated[
    str,
    AfterValidator(_env_var_name),
    WithJsonSchema({"type": "string", "minLength": 1, "pattern": ENV_VAR_NAME_PATTERN}),
]

RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
"""The only capability the Restricted Pod Security Standard lets a container add."""


def _volume(volume: dict[str, Any]) -> dict[str, Any]:
    if "hostPath" in volume:
        raise PydanticCustomError(
            "host_path_volume",
            "volume '{name}' is a hostPath volume: a job's pods do not mount node directories "
            "(the Baseline and Restricted Pod Security Standards forbid it); use the job's "
            "storage, a persistentVolumeClaim or an emptyDir",
            {"name": volume.get("name", "")},
        )
    return volume


Volume = Annotated[dict[str, Any], AfterValidator(_volume)]


def _image(reference: str) -> str:
    problem = image_reference_problem(reference)
    if problem is not None:
        raise PydanticCustomError("image_reference", "{problem}", {"problem": problem})
    return reference


ImageRef = Annotated[
    str,
    AfterValidator(_image),
    WithJsonSchema({"type": "string", "pattern": IMAGE_REFERENCE_PATTERN}),
]
"""A container image reference the kubelet can pull (`dressage.api.images`)."""


class ObjectMeta(ApiModel):
    """The subset of Kubernetes object metadata a job manifest carries."""

    model_config = ApiModel.model_config | {"extra": "allow"}

    name: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    """Job name; a DNS-1123 label because child objects are named after it."""
    namespace: str | None = None
    """Namespace of the job (cluster only)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Labels copied onto every child object."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Annotations of the job object."""


class SecretKeySelector(ApiModel):
    """A key of a Secret in the job's namespace (Kubernetes' `secretKeyRef`)."""

    name: str = Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    """The Secret's name."""
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")
    """The key within the Secret."""


class ResourceRequirements(ApiModel):
    """Kubernetes container resources (requests and limits)."""

    requests: dict[str, Quantity] = Field(default_factory=dict)
    """Resource requests, e.g. `{"cpu": "8", "memory": "64Gi"}`."""
    limits: dict[str, Quantity] = Field(default_factory=dict)
    """Resource limits, e.g. `{"nvidia.com/gpu": "8"}`."""


class EnvVar(ApiModel):
    """A plain environment variable."""

    name: EnvVarName
    """Variable name (letters, digits, `_`, `-`, `.`; not one the operator sets)."""
    value: str = ""
    """Variable value."""


class PodSecuritySpec(ApiModel):
    """How strictly one role's pods are locked down."""

    profile: Literal["restricted", "baseline"] = "restricted"
    """`restricted` (the default) meets the Restricted Pod Security Standard: the pods run as
    `runAsUser` (never root), with no privilege escalation, every capability dropped, the
    RuntimeDefault seccomp profile and no service-account token. `baseline` is the explicit
    relaxation for GPU images that must run as their own user (often root, e.g. SGLang's
    upstream images) or need capabilities: the image's user, the runtime's default
    capabilities plus `addCapabilities`, privilege escalation allowed; seccomp RuntimeDefault
    and no service-account token stay. Its pods need a namespace whose
    `pod-security.kubernetes.io/enforce` level is `baseline` (`privileged` for a capability
    outside Baseline's list, such as `IPC_LOCK` for RDMA)."""
    run_as_user: int = Field(default=1000, ge=1)
    """UID of the containers under `restricted` (the runtime images' user)."""
    fs_group: int = Field(default=1000, ge=0)
    """Group that the kubelet gives the job's storage to, so `runAsUser` can write it."""
    add_capabilities: list[Annotated[str, Field(pattern=r"^[A-Z_]+$")]] = Field(
        default_factory=list
    )
    """Linux capabilities added to the main container (`IPC_LOCK`, ...); under `restricted`
    only `NET_BIND_SERVICE`."""

    @model_validator(mode="after")
    def _check_capabilities(self) -> PodSecuritySpec:
        extra = sorted(set(self.add_capabilities) - RESTRICTED_CAPABILITIES)
        if self.profile == "restricted" and extra:
            raise ValueError(
                f"addCapabilities {extra} are not allowed under the restricted profile "
                "(only NET_BIND_SERVICE): set profile to 'baseline'"
            )
        return self


Loc = tuple[str | int, ...]


def field_errors(model: str, kind: str, problems: list[tuple[Loc, str]]) -> ValidationError:
    """A validation error for each `(loc, message)`, located at `loc` below the model being
    validated, for checks that a model validator makes: the manifest's error then names that
    field, not its parent."""
    details = [
        InitErrorDetails(
            type=PydanticCustomError(kind, "{message}", {"message": message}),
            loc=loc,
            input=None,
        )
        for loc, message in problems
    ]
    return ValidationError.from_exception_data(model, details)


class SeccompProfile(ApiModel):
    """A pod's seccomp profile: the two types the Restricted Pod Security Standard allows."""

    type: Literal["RuntimeDefault", "Localhost"] = "RuntimeDefault"
    """`RuntimeDefault` (the container runtime's profile, the operator's default) or
    `Localhost` (a profile file on the node, named by `localhostProfile`)."""
    localhost_profile: str | None = Field(default=None, min_length=1)
    """The profile's path relative to the kubelet's seccomp directory (`Localhost` only)."""

    @model_validator(mode="after")
    def _check_localhost(self) -> SeccompProfile:
        if (self.type == "Localhost") != (self.localhost_profile is not None):
            raise field_errors(
                "SeccompProfile",
                "seccomp_profile",
                [(("localhostProfile",), "required with type Localhost, and only with it")],
            )
        return self


MAX_POSIX_ID = 2147483647
"""The largest user or group ID Kubernetes accepts (`IsValidUserID`, `IsValidGroupID`)."""
POD_SECURITY_CONTEXT_FIELDS = (
    "runAsNonRoot",
    "runAsUser",
    "runAsGroup",
    "fsGroup",
    "fsGroupChangePolicy",
    "supplementalGroups",
    "seccompProfile",
)
"""The pod-level `securityContext` fields a job's pod template may set: those the Restricted
Pod Security Standard leaves to the pod (shared storage often needs the claim's owner as
`runAsUser`, `fsGroup` or a supplemental group), and `runAsNonRoot`, which most pod templates
carry, where it agrees with `security.profile`. The others are outside what the job's pods may
ask (SELinux options, sysctls, AppArmor, Windows options)."""


class PodSecurityContext(ApiModel):
    """The pod-level security settings a job may set, merged over the operator's own
    (`security`): a field set here replaces the operator's value of it."""

    run_as_non_root: bool | None = None
    """`true` makes the kubelet refuse to start a container as root: what the `restricted`
    profile sets anyway (so `false` is refused there); under `baseline` it is the pod's own
    choice."""
    run_as_user: int | None = Field(default=None, ge=0, le=MAX_POSIX_ID)
    """UID of every container; replaces `security.runAsUser`. 0 (root) only under the
    `baseline` profile and without `runAsNonRoot: true`."""
    run_as_group: int | None = Field(default=None, ge=0, le=MAX_POSIX_ID)
    """Primary GID of every container's processes."""
    fs_group: int | None = Field(default=None, ge=0, le=MAX_POSIX_ID)
    """Group the kubelet gives the pod's volumes that support ownership management (the job's
    claim among them), so `runAsUser` can write them; replaces `security.fsGroup`."""
    fs_group_change_policy: Literal["OnRootMismatch", "Always"] | None = None
    """When the kubelet changes the volumes' ownership to `fsGroup`: `OnRootMismatch` (the
    operator's default: only when the volume's root does not match, so a large claim is not
    walked at every start) or `Always`."""
    supplemental_groups: list[Annotated[int, Field(ge=0, le=MAX_POSIX_ID)]] = Field(
        default_factory=list
    )
    """Further GIDs of every container's processes, such as the group that owns an NFS
    export."""
    seccomp_profile: SeccompProfile | None = None
    """The pods' seccomp profile (default `RuntimeDefault`)."""

    @model_validator(mode="before")
    @classmethod
    def _only_allowed_fields(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        snake = {to_snake(f) for f in POD_SECURITY_CONTEXT_FIELDS}
        for key in data:
            if key not in POD_SECURITY_CONTEXT_FIELDS and key not in snake:
                raise field_errors(
                    "PodSecurityContext",
                    "security_context_field",
                    [
                        (
                            (str(key),),
                            "not accepted in a job's pod template: only the pod-level fields the "
                            "Restricted Pod Security Standard allows can be set "
                            f"({', '.join(POD_SECURITY_CONTEXT_FIELDS)}); the containers' "
                            "settings follow security.profile",
                        )
                    ],
                )
        return data


class PodTemplateOverrides(ApiModel):
    """Pod-level settings merged into the pods the operator creates for one role."""

    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels the pods must match."""
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    """Kubernetes tolerations, passed through unchanged."""
    affinity: dict[str, Any] | None = None
    """Kubernetes affinity, passed through unchanged."""
    priority_class_name: str | None = None
    """Priority class of the pods."""
    image_pull_secrets: list[str] = Field(default_factory=list)
    """Names of image pull secrets."""
    env: list[EnvVar] = Field(default_factory=list)
    """Extra environment variables for the main container."""
    volumes: list[Volume] = Field(default_factory=list)
    """Extra volumes, passed through unchanged; `hostPath` volumes are refused."""
    volume_mounts: list[dict[str, Any]] = Field(default_factory=list)
    """Extra volume mounts of the main container."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra pod labels."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Extra pod annotations."""
    security: PodSecuritySpec = Field(default_factory=PodSecuritySpec)
    """Pod security: the Restricted Pod Security Standard unless relaxed explicitly."""
    security_context: PodSecurityContext | None = None
    """Pod-level `securityContext` fields merged over the operator's (`security`):
    `runAsNonRoot`, `runAsUser`, `runAsGroup`, `fsGroup`, `fsGroupChangePolicy`,
    `supplementalGroups` and `seccompProfile`, the ones the Restricted Pod Security Standard
    allows. Shared storage often needs them: a claim owned by another UID or group (an NFS
    export, a Filestore or EFS access point). A value that agrees with `security.profile` is
    accepted (`runAsNonRoot: true` under `restricted`); one that contradicts it
    (`runAsNonRoot: false` or `runAsUser: 0` under `restricted`, `runAsUser: 0` with
    `runAsNonRoot: true`) is refused by name, and so is any other field."""

    @model_validator(mode="after")
    def _agrees_with_the_profile(self) -> PodTemplateOverrides:
        context = self.security_context
        if context is None:
            return self
        problems = security_context_contradictions(self.security.profile, context)
        if problems:
            raise field_errors("PodTemplateOverrides", "security_context_contradiction", problems)
        return self


def security_context_contradictions(
    profile: str, context: PodSecurityContext
) -> list[tuple[Loc, str]]:
    """`(field, message)` for each `securityContext` setting of a pod template that
    contradicts the role's `security.profile` or another setting: the pod would be refused by
    the Pod Security admission, or its containers by the kubelet (a root UID with
    `runAsNonRoot: true`)."""
    problems: list[tuple[Loc, str]] = []
    restricted = profile == "restricted"
    if restricted and context.run_as_non_root is False:
        problems.append(
            (
                ("securityContext", "runAsNonRoot"),
                "false contradicts security.profile 'restricted', which runs the pods as a "
                "non-root user: leave it out, set it true, or set security.profile to 'baseline'",
            )
        )
    if context.run_as_user == 0 and restricted:
        problems.append(
            (
                ("securityContext", "runAsUser"),
                "0 (root) contradicts security.profile 'restricted', which forbids root: "
                "give the UID of the image's user, or set security.profile to 'baseline'",
            )
        )
    elif context.run_as_user == 0 and context.run_as_non_root:
        problems.append(
            (
                ("securityContext", "runAsUser"),
                "0 (root) contradicts securityContext.runAsNonRoot true: the kubelet would "
                "refuse to start the containers",
            )
        )
    return problems
