"""The engine pods: independent, addressed one by one, replaced one by one, each drained
through the proxy before it stops (`engine_lifecycle`).

An engine pod runs SGLang (`spec.inference.engine: sglang`, on GPUs) or Dressage's embedded
engine (`embedded`, on CPU, from the runtime image): the same HTTP API, probes and weight
updates, another command line and resources."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources

from dressage.api.job import AsyncRLJob
from dressage.api.sglang import stand_in_release
from dressage.data.versions import INITIAL_VERSION
from dressage_operator import naming, sglang_release
from dressage_operator.children import drain_hook
from dressage_operator.children.pods import (
    DEFAULT_REQUESTS,
    Obj,
    Owner,
    container_env,
    container_resources,
    finish,
    model_path,
    object_meta,
    pod_spec,
    proxy_token_env,
    template_meta,
    with_role_spec,
)
from dressage_operator.children.restart import engine_spec_hash
from dressage_operator.children.scheduling import queue_labels
from dressage_operator.children.weight_sync import NCCL_ENV, distributed_sync
from dressage_operator.config import OperatorConfig

ENGINE_HOME = "/home/dressage"
"""The engines' `HOME`, an emptyDir: SGLang and its kernels cache there, and the SGLang image
has no home directory for the non-root user the pods run as."""
INITIAL_WEIGHT_VERSION = INITIAL_VERSION
"""Weight version the engines report before the trainer publishes any: the trainer's own label
of its initial weights (`dressage.data.versions`), so a fresh engine is never mistaken for a
newer version than the trainer's."""
BASE_WEIGHT_VERSION = "base"
"""Weight version of an engine's staged base model when the trainer warm-starts from other
weights: a label the trainer never issues, so the proxy holds such an engine out until the
weight publisher gave it the trainer's current version."""


def engine_base_version(job: AsyncRLJob) -> str:
    """The label of the weights an engine pod starts on: the trainer's `v0` when those are the
    trainer's initial weights (no warm start), else `base`."""
    return INITIAL_WEIGHT_VERSION if job.spec.model.warm_start is None else BASE_WEIGHT_VERSION


def engine_urls(job: AsyncRLJob, owner: Owner, leaving: Iterable[int] = ()) -> list[str]:
    """The URLs of the job's engine pods, `inference.replicas` of them by index, then those of
    the `leaving` indexes beyond them: engine pods a scale-down is deleting, which the proxy
    must still list while their `preStop` hook drains them."""
    replicas = job.spec.inference.replicas
    indexes = [*range(replicas), *sorted(i for i in set(leaving) if i >= replicas)]
    return [naming.engine_url(owner.name, owner.namespace, i) for i in indexes]


def engine_command(job: AsyncRLJob) -> list[str]:
    """The SGLang server command line; weights are updated over HTTP by the trainer, each
    update stamping a new version: `/update_weights_from_disk` from the job's storage, or
    `/init_weights_update_group` once and then `/update_weights_from_distributed` per bucket
    (the group's address comes with the request, so no flag changes)."""
    spec = job.spec
    cmd = [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        model_path(job),
        "--tp-size",
        str(spec.inference.tensor_parallel_size),
        "--dtype",
        spec.model.dtype,
        "--host",
        "0.0.0.0",
        "--port",
        str(naming.ENGINE_PORT),
        "--weight-version",
        engine_base_version(job),
        "--enable-metrics",
    ]
    if spec.model.tokenizer:
        cmd += ["--tokenizer-path", spec.model.tokenizer]
    if spec.rollout.seeded_sampling:
        # The job model admits seededSampling only with a release that has the flag
        # (spec.inference.sglangVersion >= 0.5.3); 0.5.2's parser refuses it.
        cmd.append("--enable-deterministic-inference")
    if spec.rollout.routing_replay != "off":
        # The job model admits routing replay only with a release that has the flag (0.5.7).
        cmd.append("--enable-return-routed-experts")
    cmd += lora_server_args(job)
    cmd += sglang_release.quiet_access_log_args(spec.inference.sglang_version)
    return cmd + list(spec.inference.extra_args)


def lora_server_args(job: AsyncRLJob) -> list[str]:
    """The engines' LoRA flags for a job that trains an adapter (`LoraSpec.server_args`)."""
    lora = job.spec.model.lora
    return [] if lora is None else lora.server_args()


EMBEDDED_REQUESTS = DEFAULT_REQUESTS["embedded"]
"""What an embedded engine pod requests unless `inference.resources` says otherwise: one core
for its forward passes and room for a small model, its KV cache and torch."""


def embedded_release(job: AsyncRLJob) -> str:
    """The SGLang release whose HTTP API an embedded engine serves: the job's
    `inference.sglangVersion`, or the tested release that stands in for it."""
    return stand_in_release(job.spec.inference.sglang_version)


def embedded_engine_command(job: AsyncRLJob, index: int) -> list[str]:
    """The embedded engine's command line (`dressage engine serve`): the model every pod
    reads, the engine port, the initial weight label and the API of `embedded_release`;
    engine `index` samples from its own seed, as `dressage run` seeds its engines. A
    built-in model is built into the engine's home directory."""
    spec = job.spec
    return [
        "python",
        "-m",
        "dressage",
        "engine",
        "serve",
        "--model",
        model_path(job),
        "--host",
        "0.0.0.0",
        "--port",
        str(naming.ENGINE_PORT),
        "--weight-version",
        engine_base_version(job),
        "--seed",
        str(spec.training.seed + index),
        "--threads",
        str(embedded_threads(job)),
        "--sglang-release",
        embedded_release(job),
        *lora_server_args(job),
    ]


def embedded_threads(job: AsyncRLJob) -> int:
    """torch threads of an embedded engine: its CPU request (or limit) in whole cores, at
    least one."""
    resources = job.spec.inference.resources
    cpu = resources.requests.get("cpu") or resources.limits.get("cpu") or "1"
    try:
        cores = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
    except ValueError:
        return 1
    return max(1, int(cores))


ENGINE_DRAIN_TIMEOUT_SECONDS = drain_hook.DRAIN_TIMEOUT_SECONDS
"""The longest the engine pod's `preStop` hook waits for the proxy's drain
(`dressage.proxy.drain`), as the hook asks it (`drain_hook`)."""
ENGINE_GRACE_PERIOD_SECONDS = 40
"""The engine pods' `terminationGracePeriodSeconds`: the drain's bound, 5 s for the hook's
own request to answer, and 15 s for SGLang to end its scheduler and detokenizer processes
and free the GPU after SIGTERM before the kubelet kills them. A drain normally ends within a
second, so even a notice shorter than this (a 30 s spot reclaim; a node's graceful shutdown
period) leaves it time; what a node taken without notice had in flight is a crash's cost."""
ENGINE_URL_ENV = drain_hook.ENGINE_URL_ENV
"""The engine's own URL as the proxy lists it (the `preStop` hook drains that engine)."""
PROXY_URL_ENV = drain_hook.PROXY_URL_ENV
DRAIN_HOOK = resources.files("dressage_operator.children").joinpath("drain_hook.py").read_text()
"""The `preStop` hook's program: the source of `dressage_operator.children.drain_hook`, a
standard-library module shipped in the package, which the engine image's Python runs."""


def engine_lifecycle() -> Obj:
    """The engine container's `lifecycle`: a `preStop` hook that drains the engine through
    the proxy, so every graceful stop (a scale-down or replacement by the operator, a node
    drain, a spot notice, a preemption) moves its generations to other engines before SIGTERM
    reaches SGLang."""
    return {"preStop": {"exec": {"command": ["python", "-c", DRAIN_HOOK]}}}


ENGINE_GENERATE_CHECK = sglang_release.ENGINE_GENERATE_CHECK
ENGINE_STARTUP_PERIOD_SECONDS = 10
ENGINE_STARTUP_FAILURES = 360
"""With the period: an hour for the model to load (the HTTP port opens only once the
scheduler has loaded it) before Kubernetes restarts the engine."""
ENGINE_GENERATE_TIMEOUT_SECONDS = 30
"""Above the generation check's own 20 s limit, so the probe sees its answer."""


EMBEDDED_STARTUP_PERIOD_SECONDS = 2
EMBEDDED_STARTUP_FAILURES = 150
"""With the period: five minutes for an embedded engine to import torch and load (or build)
its small model; it is ready in seconds, so a short period lets the proxy take it in soon."""


def engine_probes(sglang_version: str, embedded: bool = False) -> Obj:
    """The engine container's probes. The startup probe proves generation works (the model
    loaded and a token came back); liveness and readiness then use a route of that release
    that keeps answering while generation is paused and logs nothing
    (`sglang_release.engine_live_check`), so a weight update never makes Kubernetes restart an
    engine or mark it unready. The proxy does its own generation-aware health checks."""
    path = sglang_release.engine_live_check(sglang_version)
    live = {"httpGet": {"path": path, "port": "http"}, "timeoutSeconds": 5}
    return {
        "startupProbe": {
            "httpGet": {"path": ENGINE_GENERATE_CHECK, "port": "http"},
            "periodSeconds": (
                EMBEDDED_STARTUP_PERIOD_SECONDS if embedded else ENGINE_STARTUP_PERIOD_SECONDS
            ),
            "timeoutSeconds": ENGINE_GENERATE_TIMEOUT_SECONDS,
            "failureThreshold": EMBEDDED_STARTUP_FAILURES if embedded else ENGINE_STARTUP_FAILURES,
        },
        "livenessProbe": {**live, "periodSeconds": 10, "failureThreshold": 6},
        "readinessProbe": {**live, "periodSeconds": 10, "failureThreshold": 3},
    }


def build_engine_pod(
    job: AsyncRLJob,
    owner: Owner,
    config: OperatorConfig,
    index: int,
    role_spec: str | None = None,
) -> Obj:
    """One engine; engines are independent and replaced one by one. `role_spec` is the job's
    `engine_spec_hash`, when the caller has it already."""
    inference = job.spec.inference
    name = naming.engine_pod(owner.name, index)
    embedded = inference.engine == "embedded"
    resources = container_resources(
        inference.resources,
        0 if embedded else inference.tensor_parallel_size,
        DEFAULT_REQUESTS["embedded" if embedded else "sglang"],
    )
    container: Obj = {
        "name": "engine" if embedded else "sglang",
        "image": inference.image or (config.runtime_image if embedded else config.sglang_image),
        "command": embedded_engine_command(job, index) if embedded else engine_command(job),
        "env": container_env(
            {
                "DRESSAGE_JOB_CONFIG": naming.CONFIG_PATH,
                "HOME": ENGINE_HOME,
                ENGINE_URL_ENV: naming.engine_url(owner.name, owner.namespace, index),
                PROXY_URL_ENV: naming.proxy_urls(
                    owner.name, owner.namespace, job.spec.proxy.replicas
                ),
                **(NCCL_ENV if distributed_sync(job) and job.spec.trainer.gpus_per_node else {}),
            },
            inference.template,
            proxy_token_env(job),
        ),
        "lifecycle": engine_lifecycle(),
        "ports": [{"name": "http", "containerPort": naming.ENGINE_PORT}],
        "resources": resources,
        **engine_probes(embedded_release(job) if embedded else inference.sglang_version, embedded),
    }
    meta = object_meta(
        job,
        owner,
        name,
        naming.ROLE_INFERENCE,
        **{naming.LABEL_INDEX: str(index)},
        **queue_labels(job),
    )
    spec = pod_spec(job, owner, config, inference.template, container, "Always")
    spec["volumes"].append({"name": "home", "emptyDir": {}})
    container["volumeMounts"].append({"name": "home", "mountPath": ENGINE_HOME})
    spec["hostname"] = name
    spec["terminationGracePeriodSeconds"] = ENGINE_GRACE_PERIOD_SECONDS
    spec["subdomain"] = naming.engine_service(owner.name)
    pod = finish(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": template_meta(meta, inference.template),
            "spec": spec,
        }
    )
    return with_role_spec(pod, role_spec or engine_spec_hash(job))


def build_engine_pods(job: AsyncRLJob, owner: Owner, config: OperatorConfig) -> list[Obj]:
    """Every engine pod of the job, by index."""
    role_spec = engine_spec_hash(job)
    return [
        build_engine_pod(job, owner, config, i, role_spec)
        for i in range(job.spec.inference.replicas)
    ]
