"""The trainer gang: one torchrun pod per node, created together, restarted together."""

from __future__ import annotations

from dressage.api.job import PACKAGES_DIR, AsyncRLJob
from dressage_operator import naming
from dressage_operator.children.engine import engine_urls
from dressage_operator.children.pods import (
    DEFAULT_REQUESTS,
    Obj,
    Owner,
    container_env,
    container_resources,
    container_security_context,
    finish,
    init_container_resources,
    object_meta,
    pod_spec,
    proxy_token_env,
    template_meta,
    with_role_spec,
)
from dressage_operator.children.restart import trainer_spec_hash
from dressage_operator.children.scheduling import trainer_group_annotations, trainer_group_labels
from dressage_operator.children.weight_sync import distributed_sync, weight_sync_env
from dressage_operator.config import OperatorConfig


def trainer_command(job: AsyncRLJob) -> list[str]:
    """The torchrun command line of one trainer node (env vars expanded by the kubelet)."""
    return [
        "torchrun",
        "--nnodes=$(NNODES)",
        "--nproc-per-node=$(NPROC_PER_NODE)",
        "--node-rank=$(NODE_RANK)",
        "--master-addr=$(MASTER_ADDR)",
        "--master-port=$(MASTER_PORT)",
        "-m",
        "dressage",
        "train",
        "--config",
        naming.CONFIG_PATH,
    ]


def trainer_env(job: AsyncRLJob, owner: Owner, index: int) -> dict[str, str]:
    """The rendezvous and wiring environment of trainer node `index`: torchrun reads the
    rendezvous variables through its command line, `dressage train` the `DRESSAGE_*` ones
    (`dressage.orchestrator.train_cli.ENV_VARS`)."""
    spec = job.spec
    nproc = max(spec.trainer.gpus_per_node, 1)
    return {
        "MASTER_ADDR": naming.trainer_host(owner.name, owner.namespace, 0),
        "MASTER_PORT": str(naming.RENDEZVOUS_PORT),
        "NNODES": str(spec.trainer.nodes),
        "NPROC_PER_NODE": str(nproc),
        "WORLD_SIZE": str(spec.trainer.nodes * nproc),
        "NODE_RANK": str(index),
        "DRESSAGE_ROLLOUT_MAX_RETRIES": str(spec.rollout.max_retries),
        "DRESSAGE_JOB_CONFIG": naming.CONFIG_PATH,
        # The engines at the pod's creation. Rank 0's disk publisher takes the engine set from
        # the proxy (it follows `inference.replicas`); the list serves what needs a fixed set.
        "DRESSAGE_ENGINE_URLS": ",".join(engine_urls(job, owner)),
        "DRESSAGE_PROXY_URL": naming.proxy_urls(
            owner.name, owner.namespace, job.spec.proxy.replicas
        ),
        "DRESSAGE_METRICS_PORT": str(naming.METRICS_PORT),
        # The run directory on the job's storage: weights/<version>/ (which the engines load
        # from the same mount with disk sync), checkpoints/ and the model cache.
        "DRESSAGE_WORKDIR": f"{spec.storage.mount_path}/{owner.name}",
        **weight_sync_env(job, owner),
    }


INSTALL_PACKAGES_CONTAINER = "install-packages"
PACKAGES_VOLUME = "packages"


def code_env(job: AsyncRLJob) -> dict[str, str]:
    """What the trainer pods need to import the job's own code (`spec.code`): its directory on
    `PYTHONPATH` and, with packages, the user site they are installed in on `PYTHONUSERBASE`
    (which Python puts on `sys.path` ahead of the image's site-packages)."""
    code = job.spec.code
    env: dict[str, str] = {}
    directory = code.directory(job.spec.storage.mount_path)
    if directory is not None:
        env["PYTHONPATH"] = directory
    if code.packages:
        env["PYTHONUSERBASE"] = PACKAGES_DIR
    return env


def install_packages_command(job: AsyncRLJob) -> list[str]:
    """`pip install --user` of `spec.code.packages` (empty when there are none): with `--user`,
    requirements the image already satisfies (torch, transformers) are kept, not reinstalled."""
    code = job.spec.code
    if not code.packages:
        return []
    command = ["python", "-m", "pip", "install", "--user", "--no-cache-dir", "--no-input"]
    if code.index_url:
        command += ["--index-url", code.index_url]
    return [*command, *code.packages]


def _add_code(job: AsyncRLJob, container: Obj, spec: Obj) -> None:
    """Give a trainer pod `spec.code`: the `install-packages` init container (after model
    staging) and the emptyDir it installs into, mounted in both containers."""
    command = install_packages_command(job)
    if not command:
        return
    mount = {"name": PACKAGES_VOLUME, "mountPath": PACKAGES_DIR}
    spec["volumes"].append({"name": PACKAGES_VOLUME, "emptyDir": {}})
    container["volumeMounts"].append(mount)
    init = {
        "name": INSTALL_PACKAGES_CONTAINER,
        "image": container["image"],
        "command": command,
        "env": [{"name": "PYTHONUSERBASE", "value": PACKAGES_DIR}],
        "volumeMounts": [mount],
        "resources": init_container_resources(container.get("resources", {})),
        "securityContext": container_security_context(
            job.spec.trainer.template.security, with_capabilities=False
        ),
    }
    spec["initContainers"] = [*spec.get("initContainers", []), init]


def build_trainer_pods(
    job: AsyncRLJob, owner: Owner, config: OperatorConfig, gang: int
) -> list[Obj]:
    """The trainer gang: one pod per node, created together, restarted together."""
    trainer = job.spec.trainer
    role_spec = trainer_spec_hash(job)
    pods = []
    for index in range(trainer.nodes):
        name = naming.trainer_pod(owner.name, index)
        container: Obj = {
            "name": "trainer",
            "image": trainer.image or config.runtime_image,
            "command": trainer_command(job),
            "env": container_env(
                {**trainer_env(job, owner, index), **code_env(job)},
                trainer.template,
                proxy_token_env(job),
            ),
            "ports": [
                {"name": "rendezvous", "containerPort": naming.RENDEZVOUS_PORT},
                {"name": "metrics", "containerPort": naming.METRICS_PORT},
                *(
                    [
                        {
                            "name": naming.WEIGHT_SYNC_PORT_NAME,
                            "containerPort": job.spec.inference.weight_sync_port,
                        }
                    ]
                    if distributed_sync(job)
                    else []
                ),
            ],
            "resources": container_resources(
                trainer.resources, trainer.gpus_per_node, DEFAULT_REQUESTS["trainer"]
            ),
        }
        meta = object_meta(
            job,
            owner,
            name,
            naming.ROLE_TRAINER,
            **{naming.LABEL_INDEX: str(index), naming.LABEL_GANG: str(gang)},
            **trainer_group_labels(job, owner.name, gang),
        )
        spec = pod_spec(job, owner, config, trainer.template, container, "Never")
        _add_code(job, container, spec)
        spec["hostname"] = name
        spec["subdomain"] = naming.trainer_service(owner.name)
        pod_meta = template_meta(meta, trainer.template)
        group = trainer_group_annotations(job)
        if group:
            pod_meta["annotations"] = {**pod_meta.get("annotations", {}), **group}
        pod = finish({"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec})
        pods.append(with_role_spec(pod, role_spec))
    return pods
