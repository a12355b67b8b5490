"""The test kubelet's container mode, as data: one container of a pod, resolved by the kubelet
(its `$(VAR)`s expanded, DNS names and its own ports on loopback, env sources read), as the
`podman run` that runs it in its image the way a kubelet's container runtime would.

Pure: no podman, no files. The process side (start, signal, exec, wait) is
`kubelet_processes`; what the container mode models and what it does not is said in
docs/cluster.md ("The test kubelet's container mode").

What maps to what:

- the command: a container's `command` replaces the image's entrypoint (and its `CMD`), its
  `args` alone replace only the `CMD`, as Kubernetes does; `workingDir` is `--workdir`;
- env: each variable by name (`--env NAME`), its value in the podman process's environment, so
  no value (a Secret's) is on a command line; a name podman itself reads goes by value;
- volumes: every `volumeMount` a bind mount of the host directory the kubelet made for its
  volume (`subPath` below it), at the pod's own `mountPath`, so no path inside the container is
  rewritten; `readOnly` honoured, a ConfigMap or Secret volume always read-only;
- security: `runAsUser`/`runAsGroup` (the container's over the pod's) `--user`, the pod's
  `fsGroup` and `supplementalGroups` `--group-add`, `readOnlyRootFilesystem` `--read-only`
  (with no tmpfs podman would add: on Kubernetes a read-only root has no writable `/tmp` unless
  the pod mounts a volume there), `capabilities` `--cap-drop`/`--cap-add`,
  `allowPrivilegeEscalation: false` `no-new-privileges`, `seccompProfile` `RuntimeDefault`
  podman's default profile and `Unconfined` none; a setting not listed here is refused, so
  a pod asking for one fails loudly instead of running unprotected;
- network: the host's (`--network host`), where the kubelet's loopback ports are; the pod's
  hostname (`spec.hostname`, else its name) is the container's and resolves to loopback, as
  the kubelet writes it into a pod's /etc/hosts with the pod's IP;
- images: only those already in local storage (`--pull=never`); every container is removed
  when it ends (`--rm`) and labelled with its pod (`io.kubernetes.*`, as the CRI labels them)
  and with the labels the caller gives (the test kubelet that started it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Obj = dict[str, Any]

CONTAINER_SECURITY = frozenset(
    {
        "runAsUser",
        "runAsGroup",
        "runAsNonRoot",
        "readOnlyRootFilesystem",
        "capabilities",
        "allowPrivilegeEscalation",
        "privileged",
        "seccompProfile",
    }
)
"""The container `securityContext` fields the container mode models (`privileged` only false)."""
POD_SECURITY = frozenset(
    {
        "runAsUser",
        "runAsGroup",
        "runAsNonRoot",
        "fsGroup",
        "fsGroupChangePolicy",
        "supplementalGroups",
        "seccompProfile",
    }
)
"""The pod `securityContext` fields it models (`fsGroupChangePolicy` in the volumes' ownership,
`kubelet_processes.own_volumes`)."""
MOUNT_FIELDS = frozenset({"name", "mountPath", "readOnly", "subPath"})
READ_ONLY_VOLUMES = ("configMap", "secret", "downwardAPI", "projected")
"""Volume kinds Kubernetes always mounts read-only."""
PODMAN_ENV = frozenset(
    {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "TZ",
        "LD_LIBRARY_PATH",
        "LD_PRELOAD",
        "REGISTRIES_CONFIG_PATH",
        "STORAGE_DRIVER",
        "STORAGE_OPTS",
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
    }
)
PODMAN_ENV_PREFIXES = ("CONTAINERS_", "PODMAN_", "BUILDAH_", "XDG_", "LC_")
"""Environment podman (or a library it uses) reads."""
NAME_UNSAFE = re.compile(r"[^a-zA-Z0-9_.-]")


class Unmodelled(ValueError):
    """A pod asks for something the container mode does not model."""


@dataclass(frozen=True)
class PodmanRun:
    """`podman <args>` with `env` in podman's environment (the values its `--env NAME`s take)."""

    args: list[str]
    env: dict[str, str]


def container_name(pod: str, uid: str, container: str) -> str:
    """The podman name of a pod's container: unique per pod (a replacement pod of the same name
    has another uid) and per container; a restarted container reuses it, its predecessor
    removed when it ended."""
    return NAME_UNSAFE.sub("-", f"k8s-{pod}-{uid[:8]}-{container}")


def podman_run(
    pod: Obj,
    container: Obj,
    *,
    name: str,
    argv: list[str],
    env: Mapping[str, str],
    volumes: Mapping[str, Path],
    labels: Mapping[str, str] | None = None,
) -> PodmanRun:
    """The `podman run` of `container` of `pod` (a manifest), as `name`.

    `argv` is the container's `command` then `args` as the kubelet resolved them, element for
    element; `env` its environment; `volumes` the host directory of each of the pod's volumes;
    `labels` more labels of the container."""
    meta = pod.get("metadata", {})
    spec = pod.get("spec", {})
    # As the kubelet names a pod's host: at most 63 characters, none trailing `-` or `.`.
    hostname = (spec.get("hostname") or meta.get("name", name))[:63].rstrip("-.")
    args = ["run", "--rm", "--name", name, "--pull=never", "--network=host"]
    args += [f"--hostname={hostname}", f"--add-host={hostname}:127.0.0.1"]
    pod_labels = {
        "io.kubernetes.pod.name": meta.get("name", ""),
        "io.kubernetes.pod.namespace": meta.get("namespace", ""),
        "io.kubernetes.pod.uid": meta.get("uid", ""),
        "io.kubernetes.container.name": container["name"],
        **(labels or {}),
    }
    args += [f"--label={k}={v}" for k, v in pod_labels.items() if v]
    args += security_args(spec.get("securityContext") or {}, container.get("securityContext") or {})
    args += mount_args(spec.get("volumes") or [], container.get("volumeMounts") or [], volumes)
    passed: dict[str, str] = {}
    for key, value in env.items():
        if podman_reads(key):
            args.append(f"--env={key}={value}")
        else:
            args.append(f"--env={key}")
            passed[key] = value
    if container.get("workingDir"):
        args.append(f"--workdir={container['workingDir']}")
    command = container.get("command") or []
    if command:
        # JSON: an entrypoint of several words, each kept whole (podman splits a plain string).
        args.append(f"--entrypoint={json.dumps(argv[: len(command)])}")
    args += [container["image"], *argv[len(command) :]]
    return PodmanRun(args, passed)


def podman_reads(name: str) -> bool:
    """Whether podman itself may read the environment variable `name` (then a container's
    variable of that name goes by value, not through podman's environment)."""
    return name in PODMAN_ENV or name.startswith(PODMAN_ENV_PREFIXES)


def security_args(pod_context: Obj, context: Obj) -> list[str]:
    """`podman run` flags for a container's security context, the pod's as its defaults."""
    for fields, given, where in (
        (POD_SECURITY, pod_context, "pod"),
        (CONTAINER_SECURITY, context, "container"),
    ):
        unknown = sorted(set(given) - fields)
        if unknown:
            raise Unmodelled(f"{where} securityContext {unknown}: not modelled in containers")
    if context.get("privileged"):
        raise Unmodelled("a privileged container is not modelled")

    def setting(key: str) -> Any:
        return context.get(key, pod_context.get(key))

    user, group = setting("runAsUser"), setting("runAsGroup")
    args: list[str] = []
    if user is not None:
        if setting("runAsNonRoot") and int(user) == 0:
            raise Unmodelled("runAsNonRoot with runAsUser 0: Kubernetes refuses the container")
        args.append(f"--user={user}" if group is None else f"--user={user}:{group}")
    elif group is not None:
        raise Unmodelled("runAsGroup without runAsUser: the image's user is not known here")
    groups = [pod_context.get("fsGroup"), *(pod_context.get("supplementalGroups") or [])]
    for gid in dict.fromkeys(g for g in groups if g is not None):
        args.append(f"--group-add={gid}")
    if context.get("readOnlyRootFilesystem"):
        args += ["--read-only", "--read-only-tmpfs=false"]
    capabilities = context.get("capabilities") or {}
    args += [f"--cap-drop={c}" for c in capabilities.get("drop") or []]
    args += [f"--cap-add={c}" for c in capabilities.get("add") or []]
    if context.get("allowPrivilegeEscalation") is False:
        args.append("--security-opt=no-new-privileges")
    seccomp = (setting("seccompProfile") or {}).get("type", "RuntimeDefault")
    if seccomp == "Unconfined":
        args.append("--security-opt=seccomp=unconfined")
    elif seccomp != "RuntimeDefault":
        raise Unmodelled(f"seccompProfile {seccomp} is not modelled")
    return args


def mount_args(pod_volumes: list[Obj], mounts: list[Obj], volumes: Mapping[str, Path]) -> list[str]:
    """`--mount` flags binding each volume mount's host directory at its `mountPath`."""
    kinds = {v["name"]: v for v in pod_volumes}
    args = []
    for mount in mounts:
        unknown = sorted(set(mount) - MOUNT_FIELDS)
        if unknown:
            raise Unmodelled(f"volumeMount {mount['name']} {unknown}: not modelled")
        volume = kinds.get(mount["name"], {})
        host = volumes[mount["name"]] / mount.get("subPath", "")
        read_only = mount.get("readOnly") or any(k in volume for k in READ_ONLY_VOLUMES)
        for part in (str(host), mount["mountPath"]):
            if "," in part:
                raise Unmodelled(f"a mount path with a comma ({part!r}) is not modelled")
        flag = f"--mount=type=bind,src={host},dst={mount['mountPath']}"
        args.append(f"{flag},ro=true" if read_only else flag)
    return args
