"""The kind quickstart's job, `examples/kind-cpu.yaml`, trains and publishes with every pod
running as containers of the built runtime image: the real operator against the Kubernetes
API emulation, its pods run by the test kubelet in its container mode
(`tests/operator/kubelet_processes.Containers`), each container in the image the pod names
with the pod's command, environment, user, groups, capabilities and volumes, on the host's
loopback where the kubelet's ports, names and probes are.

Every pod of the example names the CPU runtime image (`dressage-runtime:VERSION-cpu` at the
chart's registry, the image the quickstart builds and loads into kind); here each names the
one podman built under the tests' registry, the only change besides the steps. The job is the one
`tests/operator/test_cluster_kind_example.py` runs as local processes (`kind_job`: the example
with fewer steps), in a namespace that enforces the Restricted Pod Security Standard. While it
runs, the trainer's container is read back from podman: the runtime image, the pod's user,
every capability dropped, no privilege escalation, its volumes at the pod's paths. When the
kubelet stops, no container of its is left.
"""

from __future__ import annotations

import json
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dressage_operator.config import DEFAULT_RUNTIME_IMAGE
from dressage_testkit.kube import ENFORCE_LABEL, EmulatedCluster, emulated_cluster, operator_env
from dressage_testkit.processes import free_port

from tests.operator.cluster_job import served_versions
from tests.operator.conftest import Operator
from tests.operator.kubelet import Kubelet
from tests.operator.kubelet_processes import ContainerProcess, Containers, Podman
from tests.operator.test_cluster_kind_example import kind_job
from tests.operator.waiting import wait_until

from .support import CONTAINERS_CONF, ROOT, Images, podman

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAMESPACE = "quickstart"
STEPS = 3


@pytest.fixture
def cluster() -> Iterator[EmulatedCluster]:
    with emulated_cluster(NAMESPACE) as c:
        yield c


@pytest.fixture
def kubelet(cluster: EmulatedCluster, images: Images, tmp_path: Path) -> Iterator[Kubelet]:
    runner = Containers(Podman({"CONTAINERS_CONF": str(CONTAINERS_CONF)}), [images.runtime_cpu])
    node = Kubelet(cluster, tmp_path / "node", runner=runner)
    yield node
    node.stop()
    assert runner.left() == [], "containers left after the kubelet stopped"


def cpu_runtime_image() -> str:
    """The CPU runtime image at the chart's registry and the project's version, as
    `scripts/build-images.sh --only runtime-cpu` tags it by default."""
    registry = DEFAULT_RUNTIME_IMAGE.rsplit("/", 1)[0]
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return f"{registry}/dressage-runtime:{version}-cpu"


def _inspect(pod: str, container: str) -> dict[str, Any]:
    """`podman inspect` of `container` of `pod`, once it runs."""

    def running() -> list[str]:
        listed = podman(
            "ps",
            f"--filter=label=io.kubernetes.pod.name={pod}",
            f"--filter=label=io.kubernetes.container.name={container}",
            "--format={{.Names}}",
        )
        return listed.stdout.split()

    (name,) = wait_until(running, 120, f"{pod}'s {container} container to run")
    found: list[dict[str, Any]] = json.loads(podman("inspect", name).stdout)
    return found[0]


def test_the_kind_quickstart_job_trains_and_publishes_in_the_built_runtime_image(
    cluster: EmulatedCluster, kubelet: Kubelet, images: Images, tmp_path: Path
) -> None:
    c = cluster
    manifest = kind_job(STEPS)
    spec = manifest["spec"]
    roles = (spec["trainer"], spec["inference"], spec["proxy"])
    assert {role["image"] for role in roles} == {cpu_runtime_image()}, roles
    for role in roles:
        role["image"] = images.runtime_cpu
    job = manifest["metadata"]["name"]
    trainer, engine = f"{job}-trainer-0", f"{job}-engine-0"
    c.label_namespace({ENFORCE_LABEL: "restricted"})
    settings = operator_env(
        c,
        tmp_path / "kubeconfig",
        DRESSAGE_OPERATOR_METRICS_PORT=str(free_port()),
        DRESSAGE_OPERATOR_SCRAPE_URL_TEMPLATE=(
            f"http://127.0.0.1:{kubelet.port(trainer, 9400)}/metrics"
        ),
    )
    operator = Operator(c, settings)
    operator.start()
    started = time.monotonic()
    try:
        kubelet.start()
        c.create(manifest)
        inspected = _inspect(trainer, "trainer")
        status = wait_until(
            lambda: (
                (s := (c.get(c.job_path(job)) or {}).get("status") or {}).get("phase")
                in ("Succeeded", "Failed")
                and s
            ),
            420,
            "the job to finish",
        )
    finally:
        operator.stop()
    seconds = time.monotonic() - started
    trainer_log = kubelet.log_text(trainer, "trainer")
    assert status["phase"] == "Succeeded", f"{json.dumps(status)}\n{trainer_log[-3000:]}"
    assert f"step {STEPS} version v{STEPS}" in trainer_log, trainer_log[-3000:]
    assert status["restarts"] == 0, f"{json.dumps(status)}\n{trainer_log[-6000:]}"
    served = served_versions(
        [p for p in kubelet.probes if p.pod == engine and p.kind == "livenessProbe"]
    )
    assert served, kubelet.log_text(engine, "engine")[-3000:]
    assert served[-1] not in ("v0", "base"), served

    # Every container of every pod ran in the runtime image, none here.
    ran = [
        (pod.name, name, state.process)
        for pod in [*kubelet.pods.values(), *kubelet.finished]
        for name, state in pod.containers.items()
    ]
    assert {p for p, _, _ in ran} >= {trainer, engine, f"{job}-proxy-0"}, ran
    assert all(isinstance(process, ContainerProcess) for _, _, process in ran), ran

    # The trainer's container as podman ran it: the pod's image, user and security context.
    assert inspected["ImageName"] == images.runtime_cpu
    assert inspected["Config"]["User"] == "1000"
    host = inspected["HostConfig"]
    assert "no-new-privileges" in host["SecurityOpt"], host["SecurityOpt"]
    assert inspected["EffectiveCaps"] in (None, []), inspected["EffectiveCaps"]
    assert host["NetworkMode"] == "host"
    mounts = {m["Destination"]: m for m in inspected["Mounts"]}
    assert mounts["/etc/dressage"]["RW"] is False, mounts
    print(f"\nkind quickstart in containers: {seconds:.0f} s to a finished job ({STEPS} steps)")
