"""The test kubelet's container mode as data (`kubelet_container.podman_run`): a pod's
container, resolved by the kubelet, as the `podman run` that runs it in its image; every pod
the operator builds translates (nothing in them is outside what the mode models); and a
volume's files go to the pod's `fsGroup` as the kubelet gives them (`own_volume`). The mode's
runs themselves are in the images tier (tests/images/test_kubelet_containers.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from dressage_operator import children
from dressage_operator.config import OperatorConfig

from dressage.api import validate_job

from .cluster_job import job_manifest
from .kubelet_container import PodmanRun, Unmodelled, container_name, podman_run
from .kubelet_processes import own_volume

Obj = dict[str, Any]
VOLUMES = {
    "config": Path("/node/pods/p/volumes/config"),
    "storage": Path("/node/claims/shared"),
    "scratch": Path("/node/pods/p/volumes/scratch"),
}


def _pod(container: Obj, **spec: Any) -> Obj:
    return {
        "metadata": {"name": "job-trainer-0", "namespace": "ns", "uid": "0123456789abcdef"},
        "spec": {
            "containers": [container],
            "volumes": [
                {"name": "config", "configMap": {"name": "job-config"}},
                {"name": "storage", "persistentVolumeClaim": {"claimName": "shared"}},
                {"name": "scratch", "emptyDir": {}},
            ],
            **spec,
        },
    }


def _run(container: Obj, argv: list[str] | None = None, env: Any = None, **spec: Any) -> PodmanRun:
    container = {"name": "main", "image": "localhost/runtime:t", **container}
    command = [*container.get("command", []), *container.get("args", [])]
    return podman_run(
        _pod(container, **spec),
        container,
        name="k8s-job-trainer-0-01234567-main",
        argv=command if argv is None else argv,
        env=env or {},
        volumes=VOLUMES,
    )


def _flags(run: PodmanRun, prefix: str) -> list[str]:
    return [a for a in run.args if a.startswith(prefix)]


def _tail(run: PodmanRun) -> list[str]:
    """The image and what follows it."""
    return run.args[run.args.index("localhost/runtime:t") :]


def test_the_run_is_removed_on_exit_never_pulls_and_sits_on_the_hosts_network() -> None:
    run = _run({"command": ["python", "-m", "dressage"]})
    assert run.args[:6] == [
        "run",
        "--rm",
        "--name",
        "k8s-job-trainer-0-01234567-main",
        "--pull=never",
        "--network=host",
    ]
    assert "--hostname=job-trainer-0" in run.args
    assert "--add-host=job-trainer-0:127.0.0.1" in run.args
    assert "--label=io.kubernetes.pod.uid=0123456789abcdef" in run.args
    assert "--label=io.kubernetes.container.name=main" in run.args
    named = _run({"command": ["python"]}, hostname="job-trainer-0", subdomain="job-trainer")
    assert "--hostname=job-trainer-0" in named.args
    long = _run({"command": ["python"]}, hostname=f"{'a' * 62}-b")
    assert f"--hostname={'a' * 62}" in long.args


@pytest.mark.parametrize(
    ("container", "argv", "entrypoint", "tail"),
    [
        # `command` replaces the image's entrypoint and CMD; `args` follow it.
        (
            {"command": ["python", "-m", "dressage"], "args": ["train", "--port", "8000"]},
            ["python", "-m", "dressage", "train", "--port", "41234"],
            ["python", "-m", "dressage"],
            ["train", "--port", "41234"],
        ),
        # `command` alone: the image's CMD is not appended (podman drops it with --entrypoint).
        ({"command": ["sh", "-c", "echo a b"]}, None, ["sh", "-c", "echo a b"], []),
        # `args` alone replace the CMD only: the image's entrypoint runs them.
        ({"args": ["engine", "serve"]}, None, None, ["engine", "serve"]),
        ({}, None, None, []),
    ],
    ids=["command-and-args", "command", "args", "neither"],
)
def test_command_and_args_map_to_the_entrypoint_and_the_arguments_as_kubernetes_does(
    container: Obj, argv: list[str] | None, entrypoint: list[str] | None, tail: list[str]
) -> None:
    run = _run(container, argv)
    flags = _flags(run, "--entrypoint=")
    if entrypoint is None:
        assert flags == []
    else:
        assert [json.loads(f.removeprefix("--entrypoint=")) for f in flags] == [entrypoint]
    assert _tail(run) == ["localhost/runtime:t", *tail]


def test_the_working_directory_is_the_containers_or_the_images() -> None:
    assert "--workdir=/work" in _run({"workingDir": "/work"}).args
    assert _flags(_run({}), "--workdir") == []


def test_env_goes_by_name_its_values_in_podmans_environment() -> None:
    env = {"TOKEN": "s3cret", "MULTI": "a\nb $x", "EMPTY": "", "PATH": "/opt/bin:/usr/bin"}
    run = _run({}, env=env)
    assert _flags(run, "--env") == [
        "--env=TOKEN",
        "--env=MULTI",
        "--env=EMPTY",
        "--env=PATH=/opt/bin:/usr/bin",
    ]
    assert run.env == {"TOKEN": "s3cret", "MULTI": "a\nb $x", "EMPTY": ""}
    assert not [a for a in run.args if "s3cret" in a]


@pytest.mark.parametrize(
    ("pod_context", "context", "expected"),
    [
        # What the operator's restricted pods ask for.
        (
            {
                "fsGroup": 1000,
                "fsGroupChangePolicy": "OnRootMismatch",
                "seccompProfile": {"type": "RuntimeDefault"},
                "runAsNonRoot": True,
                "runAsUser": 1000,
            },
            {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            [
                "--user=1000",
                "--group-add=1000",
                "--cap-drop=ALL",
                "--security-opt=no-new-privileges",
            ],
        ),
        # The container's user and group win over the pod's; supplemental groups join fsGroup.
        (
            {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 2000, "supplementalGroups": [3000]},
            {"runAsUser": 65532, "runAsGroup": 65533},
            ["--user=65532:65533", "--group-add=2000", "--group-add=3000"],
        ),
        (
            {},
            {
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                "allowPrivilegeEscalation": True,
                "privileged": False,
            },
            [
                "--read-only",
                "--read-only-tmpfs=false",
                "--cap-drop=ALL",
                "--cap-add=NET_BIND_SERVICE",
            ],
        ),
        ({"seccompProfile": {"type": "Unconfined"}}, {}, ["--security-opt=seccomp=unconfined"]),
        # The container's profile wins over the pod's.
        (
            {"seccompProfile": {"type": "Unconfined"}},
            {"seccompProfile": {"type": "RuntimeDefault"}},
            [],
        ),
        ({}, {}, []),
    ],
    ids=[
        "restricted",
        "user-and-groups",
        "read-only-capabilities",
        "unconfined",
        "runtime",
        "none",
    ],
)
def test_security_contexts_map_to_podmans_flags(
    pod_context: Obj, context: Obj, expected: list[str]
) -> None:
    run = _run({"securityContext": context}, securityContext=pod_context)
    flags = [
        a
        for a in run.args
        if a.startswith(("--user", "--group-add", "--read-only", "--cap-", "--security-opt"))
    ]
    assert flags == expected


@pytest.mark.parametrize(
    ("pod_context", "context", "match"),
    [
        ({}, {"privileged": True}, "privileged"),
        ({}, {"seLinuxOptions": {"level": "s0"}}, "seLinuxOptions"),
        ({"sysctls": [{"name": "a", "value": "1"}]}, {}, "sysctls"),
        ({"runAsNonRoot": True}, {"runAsUser": 0}, "runAsNonRoot"),
        ({"runAsGroup": 5}, {}, "runAsGroup without runAsUser"),
        ({}, {"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}}, "Localhost"),
    ],
)
def test_a_security_setting_the_mode_does_not_model_is_refused(
    pod_context: Obj, context: Obj, match: str
) -> None:
    with pytest.raises(Unmodelled, match=match):
        _run({"securityContext": context}, securityContext=pod_context)


def test_volumes_are_bind_mounts_at_the_pods_own_paths_read_only_where_kubernetes_makes_them() -> (
    None
):
    mounts = [
        {"name": "config", "mountPath": "/etc/dressage"},  # a ConfigMap: read-only anyway
        {"name": "storage", "mountPath": "/dressage"},
        {"name": "storage", "mountPath": "/models", "subPath": "models", "readOnly": True},
        {"name": "scratch", "mountPath": "/dev/shm"},
    ]
    assert _flags(_run({"volumeMounts": mounts}), "--mount") == [
        "--mount=type=bind,src=/node/pods/p/volumes/config,dst=/etc/dressage,ro=true",
        "--mount=type=bind,src=/node/claims/shared,dst=/dressage",
        "--mount=type=bind,src=/node/claims/shared/models,dst=/models,ro=true",
        "--mount=type=bind,src=/node/pods/p/volumes/scratch,dst=/dev/shm",
    ]
    mount = {"name": "storage", "mountPath": "/d", "mountPropagation": "HostToContainer"}
    with pytest.raises(Unmodelled, match="mountPropagation"):
        _run({"volumeMounts": [mount]})


def test_a_containers_name_is_unique_per_pod_uid_and_container_and_valid_for_podman() -> None:
    assert (
        container_name("job-engine-0", "abcdef0123", "engine") == "k8s-job-engine-0-abcdef01-engine"
    )
    assert container_name("a.b", "u:1", "c") == "k8s-a.b-u-1-c"


def test_every_pod_the_operator_builds_runs_in_a_container() -> None:
    """The pods of the cluster tests' job (trainer with its staging init container, engines,
    the proxy's template): the mode models every field they use."""
    job = validate_job(job_manifest("0.5.2", 3))
    owner = children.Owner("cl", "ns", "u")
    config = OperatorConfig()
    pods = [
        *children.build_trainer_pods(job, owner, config, gang=0),
        *children.build_engine_pods(job, owner, config),
    ]
    template = children.build_proxy_deployment(job, owner, config)["spec"]["template"]
    pods.append({"metadata": {"name": "cl-proxy-0", "uid": "u"}, "spec": template["spec"]})
    volumes = {v["name"]: Path("/node") / v["name"] for p in pods for v in p["spec"]["volumes"]}
    for pod in pods:
        for container in [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]:
            argv = [*container.get("command", []), *container.get("args", [])]
            run = podman_run(pod, container, name="n", argv=argv, env={}, volumes=volumes)
            assert "--user=1000" in run.args, pod["metadata"]["name"]
            assert "--cap-drop=ALL" in run.args


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another group needs root")
def test_a_volumes_files_go_to_the_pods_fs_group_only_on_a_root_mismatch(tmp_path: Path) -> None:
    root = tmp_path / "claim"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f").write_text("x")
    (root / "sub" / "f").chmod(0o600)
    own_volume(root, 2000, "OnRootMismatch")
    for path, mode in ((root, 0o2770), (root / "sub", 0o2770), (root / "sub" / "f", 0o660)):
        info = path.stat()
        assert (info.st_gid, info.st_mode & mode) == (2000, mode), (path, oct(info.st_mode))
    # The root matches now: a file added later keeps its group (no walk), unlike `Always`.
    (root / "later").write_text("y")
    os.chown(root / "later", -1, 0)
    own_volume(root, 2000, "OnRootMismatch")
    assert (root / "later").stat().st_gid == 0
    own_volume(root, 2000, "Always")
    assert (root / "later").stat().st_gid == 2000
