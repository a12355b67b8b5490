"""The images (the operator, the CUDA and CPU runtimes, SGLang's), built by
`scripts/build-images.sh` on local stand-in bases, run as the chart's and the operator's pods
run them: their own numeric non-root user, a read-only root filesystem, every capability
dropped, no privilege escalation; they write only to the tmpfs and volumes a test mounts.

- The operator image starts against the emulated API server (`dressage_testkit.kube`, on
  this machine's loopback, reached with `--network host` and a kubeconfig naming it) and
  reconciles a job to its children.
- The runtime image trains a few steps of `examples/local-tiny.yaml` with `dressage run`.
- The SGLang image of each tested release parses the exact engine command the operator renders
  (`children.engine_command`) with SGLang's own parser (`ServerArgs.add_cli_args`), inside the
  image; the entrypoint (`sglang.launch_server`) prints its help as the pods' user. Only the
  default release's: the stand-in base holds SGLang's Python package, not its GPU kernels,
  which older releases' launch_server imports (`sgl_kernel`).
- Each image's size above its base is bounded (`SIZE_BUDGET_MB`) and printed.
- The stand-in bases, once built, are found by their recipe's hash: a second run builds none.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dressage_operator import children
from dressage_testkit.kube import EmulatedCluster, emulated_cluster
from dressage_testkit.processes import free_port

from dressage.api import load_job, validate_job
from dressage.api.sglang import SGLANG_DEFAULT_VERSION, SGLANG_TESTED_RELEASES
from tests.images.support import Images, podman, podman_env

ROOT = Path(__file__).resolve().parents[2]
RESTRICTED = (
    "--read-only",
    "--tmpfs",
    "/tmp:rw,mode=1777",
    "--cap-drop",
    "ALL",
    "--security-opt",
    "no-new-privileges",
)
"""What the pods' security contexts ask for (charts/dressage-operator/values.yaml
`securityContext`, dressage_operator.children.pods `container_security_context`), plus a
read-only root: whatever an image writes goes to a tmpfs or volume the test mounts. (Podman's
tmpfs ignores `mode=` here; `U` gives a tmpfs to the container's user, as an emptyDir's 0777
lets any user write it.)"""
OPERATOR_USER = "65532:65532"
"""The operator image's user (its Dockerfile, the chart's `podSecurityContext`)."""
JOB_USER = "1000:1000"
"""The job pods' user (`PodSecuritySpec.run_as_user`, the runtime image's own)."""
SIZE_BUDGET_MB = {"operator": 120, "runtime": 900, "sglang": 60}
"""The most an image may add to its base, in MB. Today (stand-in bases): the operator adds
about 90 (kopf, pydantic, the strict schemas of 13 Kubernetes releases; images/operator/Dockerfile
says what each part is for), the runtime about 690 (transformers, datasets, pyarrow,
matplotlib), the SGLang image about 15 (the project; SGLang's image holds the rest)."""


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """`condition()`'s first truthy value, polled until `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def size_mb(reference: str) -> float:
    out = podman("image", "inspect", "--format", "{{.Size}}", reference).stdout
    return int(out.strip()) / 1e6


def test_image_sizes_stay_within_their_budget(
    images: Images, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each image's size and what it adds to its (stand-in) base, printed in the test run's
    output whether the test passes or not."""
    bases = dict(images.bases)
    report, over = [], []
    for name, reference in images.all().items():
        size, base = size_mb(reference), size_mb(bases[name])
        budget = SIZE_BUDGET_MB[name.split("-")[0]]
        above = size - base
        report.append(f"{name}: {size:.0f} MB ({above:.0f} MB above its base, budget {budget})")
        if above > budget:
            over.append(report[-1])
    with capsys.disabled():
        print("\nimage sizes:", *report, sep="\n  ")
    assert not over, over


def test_a_second_run_of_the_stand_in_bases_builds_none(images: Images) -> None:
    """The tier's build made (or found) the stand-in bases; run again, the script finds the
    hash of each one's recipe on its label (io.dressage.stand-in.recipe) and builds nothing."""
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-stand-in-bases.sh")],
        cwd=ROOT,
        env=podman_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "building" not in result.stderr, result.stderr[-4000:]
    found = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert set(dict(images.bases).values()) <= set(found.values()), (found, images.bases)


# --- the operator ---------------------------------------------------------------------------


@pytest.fixture
def cluster() -> Iterator[EmulatedCluster]:
    with emulated_cluster() as c:
        yield c


class Container:
    """A detached container this test started, removed at the end."""

    def __init__(self, *args: str) -> None:
        self.id = podman("run", "--detach", *args).stdout.strip()

    def logs(self) -> str:
        result = podman("logs", self.id, check=False)
        return (result.stdout + result.stderr)[-4000:]

    def running(self) -> bool:
        state = podman("inspect", "--format", "{{.State.Running}}", self.id, check=False)
        return state.stdout.strip() == "true"

    def remove(self) -> None:
        podman("rm", "--force", "--time", "10", self.id, check=False)


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_the_operator_image_reconciles_a_job_on_the_emulated_cluster(
    images: Images, cluster: EmulatedCluster, tmp_path: Path
) -> None:
    kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig")
    kubeconfig.chmod(0o644)
    health = free_port()
    operator = Container(
        "--network",
        "host",
        *RESTRICTED,
        "--user",
        OPERATOR_USER,
        "--volume",
        f"{kubeconfig}:/etc/dressage/kubeconfig:ro",
        "--env",
        "KUBECONFIG=/etc/dressage/kubeconfig",
        images.operator,
        "--namespace",
        cluster.namespace,
        "--metrics-port",
        "0",
        "--health-port",
        str(health),
    )
    try:

        def up() -> bool:
            assert operator.running(), operator.logs()
            return listening(health)

        wait_for(up, 120, "the operator's liveness port")
        cluster.create(
            {
                "apiVersion": "dressage.io/v1alpha1",
                "kind": "AsyncRLJob",
                "metadata": {"name": "in-image"},
                "spec": {
                    "model": {"source": "builtin:tiny"},
                    "storage": {"persistentVolumeClaim": "shared"},
                    "trainer": {"nodes": 1, "gpusPerNode": 0},
                    "inference": {"replicas": 1},
                },
            }
        )

        def children_of_the_job() -> list[str]:
            assert operator.running(), operator.logs()
            return [
                p["metadata"]["name"]
                for p in cluster.items("v1", "pods")
                if p["metadata"]["name"].startswith("in-image-")
            ]

        def once_the_engine_pod_exists() -> list[str]:
            # The operator creates the job's pods one after another, the trainer's first: the
            # first pod is not yet all of them.
            names = children_of_the_job()
            return names if any("engine" in name for name in names) else []

        pods = wait_for(once_the_engine_pod_exists, 120, "the job's engine pod")
        assert any("engine" in name for name in pods), pods
        status = (cluster.get(cluster.job_path("in-image")) or {}).get("status") or {}
        assert status.get("phase"), status
    finally:
        logs = operator.logs()
        operator.remove()
    assert "Traceback" not in logs, logs


SCHEMAS = """
import json, pathlib, kubernetes_validate
from importlib.util import find_spec
from dressage_operator.schemas import OLDEST_RELEASE
root = pathlib.Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
print(json.dumps({
    "schemas": sorted(p.name for p in root.iterdir()),
    "oldest": "v%d.%d.0-local-strict" % OLDEST_RELEASE,
    "absent": [
        m for m in ("kubernetes", "tokenizers", "huggingface_hub", "torch") if not find_spec(m)
    ],
}))
"""


def test_the_operator_image_holds_only_the_schemas_it_reads_and_no_model_side_packages(
    images: Images,
) -> None:
    """The operator reads the strict schemas of the releases between `OLDEST_RELEASE` and the
    newest shipped; the image keeps exactly those, and none of the packages it never imports."""
    result = podman(
        "run", "--rm", "--network", "none", *RESTRICTED, "--user", OPERATOR_USER,
        "--entrypoint", "python", images.operator, "-c", SCHEMAS,
    )  # fmt: skip
    found = json.loads(result.stdout.strip().splitlines()[-1])
    schemas = found["schemas"]
    assert schemas, found
    assert all(name.endswith("-local-strict") for name in schemas), schemas
    assert schemas[0] == found["oldest"], schemas
    assert found["absent"] == ["kubernetes", "tokenizers", "huggingface_hub", "torch"], found


# --- the runtime ----------------------------------------------------------------------------


def test_the_runtime_image_trains_the_tiny_example(images: Images, tmp_path: Path) -> None:
    """`dressage run` in the image, offline, as the job's user: its trainer, engine and proxy
    processes on the container's own loopback, its runs on a volume, HOME on a tmpfs."""
    workdir = tmp_path / "runs"
    workdir.mkdir()
    os.chown(workdir, 1000, 1000)
    result = podman(
        "run",
        "--rm",
        "--network",
        "none",
        *RESTRICTED,
        "--tmpfs",
        "/home/dressage:rw,U",
        "--user",
        JOB_USER,
        "--volume",
        f"{ROOT / 'examples'}:/examples:ro",
        "--volume",
        f"{workdir}:/runs",
        images.runtime,
        "run",
        "/examples/local-tiny.yaml",
        "--steps",
        "3",
        "--workdir",
        "/runs",
        "--metrics-port",
        "0",
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    written = {str(p.relative_to(workdir)) for p in workdir.rglob("*") if p.is_file()}
    # The third step trained and was checkpointed, and its weights published as a version.
    assert "local-tiny/checkpoints/step-000003/state.json" in written, sorted(written)
    assert "local-tiny/weights/v3/model.safetensors" in written, sorted(written)


# --- the SGLang engine ----------------------------------------------------------------------

PARSE = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs

class Parser(argparse.ArgumentParser):
    def error(self, message):
        sys.exit("refused: " + message)

parser = Parser()
ServerArgs.add_cli_args(parser)
args = vars(parser.parse_args(sys.argv[1:]))
flags = ("--model-path", "--tp-size", "--weight-version", "--enable-metrics", "--port")
fields = {f: {a.dest for a in parser._actions if f in a.option_strings}.pop() for f in flags}
print(json.dumps({f: args[d] for f, d in fields.items()}))
"""


def run_as_engine(image: str, *args: str, entrypoint: str | None = None) -> Any:
    """`podman run` of the SGLang image as the engine pods run it: the pods' user, `HOME` on a
    volume (children/engine.py `ENGINE_HOME`), no network needed."""
    return podman(
        "run",
        "--rm",
        "--network",
        "none",
        *RESTRICTED,
        "--user",
        JOB_USER,
        "--env",
        f"HOME={children.engine.ENGINE_HOME}",
        "--tmpfs",
        f"{children.engine.ENGINE_HOME}:rw,U",
        *(["--entrypoint", entrypoint] if entrypoint else []),
        image,
        *args,
        timeout=300,
        check=False,
    )


def engine_job(release: str) -> Any:
    job = load_job(ROOT / "examples" / "single-node-gpu.yaml")
    wire = job.to_wire()
    spec = dict(wire["spec"])
    spec["inference"] = {**spec.get("inference", {}), "sglangVersion": release}
    return validate_job({**wire, "spec": spec})


@pytest.mark.parametrize("release", SGLANG_TESTED_RELEASES)
def test_the_sglang_image_parses_the_engine_command_the_operator_renders(
    images: Images, release: str
) -> None:
    job = engine_job(release)
    command = children.engine_command(job)
    assert command[:3] == ["python", "-m", "sglang.launch_server"]
    image = images.sglang_image(release)
    result = run_as_engine(image, "-c", PARSE, *command[3:], entrypoint="python")
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed["--model-path"] == job.spec.model.staged_path(job.spec.storage.mount_path)
    assert parsed["--tp-size"] == job.spec.inference.tensor_parallel_size
    assert parsed["--weight-version"] == children.engine_base_version(job)
    assert parsed["--enable-metrics"] is True
    assert parsed["--port"] == int(command[command.index("--port") + 1])


def test_the_default_sglang_image_runs_its_entrypoint_as_the_pods_user(images: Images) -> None:
    result = run_as_engine(images.sglang_image(SGLANG_DEFAULT_VERSION), "--help")
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    assert "--model-path" in result.stdout
