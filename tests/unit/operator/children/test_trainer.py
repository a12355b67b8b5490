"""The trainer gang: its rendezvous and wiring, the environment the README lists, and
`spec.code` (the job's own code reaches the trainer pods, and only them: the engines and the
proxy never import it; a bad value is refused with the field named)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from dressage_operator import children, naming
from dressage_testkit.kube import restricted_violations

from dressage.api import AsyncRLJob, load_job
from dressage.api.job import PACKAGES_DIR
from dressage.api.loader import JobValidationError, validate_job

from .support import CONFIG, ENV_NAME, EXAMPLES, K8S_VERSION, OWNER, README, env_of


def _manifest(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "job-a"},
        "spec": {
            "model": {"source": "Qwen/Qwen2.5-0.5B-Instruct"},
            "storage": {"persistentVolumeClaim": "shared", "mountPath": "/data"},
            **spec,
        },
    }


def _job(**spec: Any) -> AsyncRLJob:
    return validate_job(_manifest(**spec))


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container["env"]}


def test_code_on_storage_and_packages_reach_every_trainer_pod() -> None:
    job = _job(
        code={
            "path": "jobs/maze",
            "packages": ["math-verify==0.8.0", "mylib @ https://example.org/mylib-1.0.whl"],
            "indexUrl": "https://pypi.example.org/simple",
        },
        trainer={"nodes": 2, "gpusPerNode": 0},
    )
    pods = children.build_trainer_pods(job, OWNER, CONFIG, gang=0)
    assert len(pods) == 2
    for pod in pods:
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
        spec = pod["spec"]
        assert restricted_violations(spec) == []
        (container,) = spec["containers"]
        env = _env(container)
        assert env["PYTHONPATH"] == "/data/jobs/maze"
        assert env["PYTHONUSERBASE"] == PACKAGES_DIR
        # The model is staged first; the packages are installed by the trainer's image into
        # the emptyDir that the trainer then imports them from.
        stage, install = spec["initContainers"]
        assert stage["name"] == children.STAGE_MODEL_CONTAINER
        assert install["name"] == children.INSTALL_PACKAGES_CONTAINER
        assert install["image"] == container["image"]
        assert install["command"] == [
            "python",
            "-m",
            "pip",
            "install",
            "--user",
            "--no-cache-dir",
            "--no-input",
            "--index-url",
            "https://pypi.example.org/simple",
            "math-verify==0.8.0",
            "mylib @ https://example.org/mylib-1.0.whl",
        ]
        assert _env(install) == {"PYTHONUSERBASE": PACKAGES_DIR}
        mount = {"name": children.PACKAGES_VOLUME, "mountPath": PACKAGES_DIR}
        assert install["volumeMounts"] == [mount]
        assert mount in container["volumeMounts"]
        assert {"name": children.PACKAGES_VOLUME, "emptyDir": {}} in spec["volumes"]


def test_the_engines_and_the_proxy_never_get_the_code() -> None:
    job = _job(code={"path": "jobs/maze", "packages": ["numpy"]})
    engine = children.build_engine_pod(job, OWNER, CONFIG, 0)["spec"]
    proxy = children.build_proxy_deployment(job, OWNER, CONFIG)["spec"]["template"]["spec"]
    for spec in (engine, proxy):
        assert not {"PYTHONPATH", "PYTHONUSERBASE"} & set(_env(spec["containers"][0]))
        assert [c["name"] for c in spec["initContainers"]] == [children.STAGE_MODEL_CONTAINER]


def test_an_absolute_path_under_the_mount_and_path_only_code() -> None:
    job = _job(code={"path": "/data/jobs/maze/"})
    (pod,) = children.build_trainer_pods(job, OWNER, CONFIG, gang=0)
    assert _env(pod["spec"]["containers"][0])["PYTHONPATH"] == "/data/jobs/maze"
    assert [c["name"] for c in pod["spec"]["initContainers"]] == [children.STAGE_MODEL_CONTAINER]
    assert all(v["name"] != children.PACKAGES_VOLUME for v in pod["spec"]["volumes"])


def test_without_code_the_trainer_pods_are_unchanged() -> None:
    job = _job()
    assert children.code_env(job) == {}
    assert children.install_packages_command(job) == []
    (pod,) = children.build_trainer_pods(job, OWNER, CONFIG, gang=0)
    assert "PYTHONPATH" not in _env(pod["spec"]["containers"][0])


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"code": {"path": "/etc/maze"}}, "spec", "code.path '/etc/maze' is not on the job's"),
        ({"code": {"path": "/database/x"}}, "spec", "code.path '/database/x' is not on"),
        ({"code": {"path": "jobs/../../etc"}}, "spec.code", "must not contain '..'"),
        ({"code": {"packages": ["-e ."]}}, "spec.code.packages[0]", "pip options"),
        ({"code": {"packages": ["numpy", " "]}}, "spec.code.packages[1]", "not a requirement"),
        ({"code": {"packages": ["a\nb"]}}, "spec.code.packages[0]", "not a requirement"),
        ({"code": {"indexUrl": "ftp://x"}}, "spec.code.indexUrl", "pattern"),
        ({"code": {"indexUrl": "https://x/simple"}}, "spec.code", "code.packages is empty"),
        (
            {
                "code": {"path": "jobs/maze"},
                "trainer": {"template": {"env": [{"name": "PYTHONPATH", "value": "/x"}]}},
            },
            "spec",
            "trainer.template.env sets PYTHONPATH",
        ),
    ],
)
def test_a_bad_code_value_is_refused_with_the_field_named(
    spec: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(JobValidationError) as info:
        validate_job(_manifest(**spec))
    ((path, text),) = info.value.errors
    assert path == field
    assert message in text


def test_trainer_gang_rendezvous_and_wiring() -> None:
    job = load_job(EXAMPLES[0].parent / "multi-node-partial-rollout.yaml")
    pods = children.build_trainer_pods(job, OWNER, CONFIG, gang=2)
    assert [p["metadata"]["name"] for p in pods] == ["job-a-trainer-0", "job-a-trainer-1"]
    for rank, pod in enumerate(pods):
        spec = pod["spec"]
        assert (spec["hostname"], spec["subdomain"]) == (f"job-a-trainer-{rank}", "job-a-trainer")
        assert spec["restartPolicy"] == "Never"
        assert spec["priorityClassName"] == "gpu-training"
        assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
        (container,) = spec["containers"]
        env = env_of(container)
        assert env["MASTER_ADDR"] == "job-a-trainer-0.job-a-trainer.ns.svc"
        assert (env["NNODES"], env["NPROC_PER_NODE"], env["WORLD_SIZE"]) == ("2", "8", "16")
        assert env["NODE_RANK"] == str(rank)
        assert env["DRESSAGE_ROLLOUT_MAX_RETRIES"] == "3"
        assert env["NCCL_DEBUG"] == "WARN"
        assert env["DRESSAGE_ENGINE_URLS"].split(",")[3] == (
            "http://job-a-engine-3.job-a-engine.ns.svc:30000"
        )
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert container["command"][:1] == ["torchrun"]
        assert "--node-rank=$(NODE_RANK)" in container["command"]
        assert container["command"][-5:] == [
            "-m",
            "dressage",
            "train",
            "--config",
            naming.CONFIG_PATH,
        ]
        assert pod["metadata"]["labels"][naming.LABEL_GANG] == "2"
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports == {"rendezvous": 29500, "metrics": 9400}


def test_readme_lists_the_trainer_environment_the_builders_set() -> None:
    text = README.read_text()
    trainer = text[text.index("- trainer `") : text.index("- engine `")]
    listed = set(ENV_NAME.findall(trainer))
    job = load_job(EXAMPLES[0].parent / "multi-node-partial-rollout.yaml")
    assert listed == set(children.trainer_env(job, OWNER, 0))
