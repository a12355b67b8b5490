"""Pure builders of a job's child objects: `build_*(job, owner, config) -> dict`.

No I/O here: the handlers apply what these functions return. Each child carries the job's
labels, an owner reference to the job (so Kubernetes garbage-collects it with the job) and the
hash of its desired content (so drift is one string comparison).

Roles and how they are wired:
- trainer: one Pod per node, `<job>-trainer-<i>`, reachable as
  `<job>-trainer-<i>.<job>-trainer.<ns>.svc` through a headless Service; rank 0 is the
  torch.distributed master and serves the job's `/metrics` on port 9400.
- inference: one SGLang Pod per replica, `<job>-engine-<i>`, addressed individually through the
  headless `<job>-engine` Service (the proxy balances across them and health-checks them; a
  failed engine is replaced alone).
- proxy: a Deployment `<job>-proxy` behind a ClusterIP Service `<job>-proxy` and a headless
  Service `<job>-proxy-replicas` of its ready pods (the replicas the trainer's client hashes
  prompt groups onto, and an engine's drain hook drains on).
- weight sync (`spec.inference.weightSync: distributed`): trainer rank 0 serves the
  weight-update group's rendezvous on `spec.inference.weightSyncPort` (declared on the trainer
  pods and their Service as `weight-sync`) at its stable name
  `<job>-trainer-0.<job>-trainer.<ns>.svc`; the trainer gets that address and port
  (`weight_sync_env`) and forms one group per engine, trainer rank 0 and the engine's
  tensorParallelSize ranks, when the engine joins (`weight_sync_rendezvous`), NCCL between GPU
  pods with the NCCL environment of `NCCL_ENV`.
- config: a ConfigMap `<job>-config` with the job manifest (`job.yaml`) the runtime loads with
  `dressage.api.load_job`, and the engine URLs (`engines`) the proxy follows while the job runs:
  a change of `inference.replicas` creates or deletes engine pods and rewrites that list, the
  proxy takes up the list, and the trainer's weight publisher, which reads the engine set from
  the proxy, brings each new engine to the current weight version before the proxy routes to
  it.
- model staging: when `spec.model.source` is a Hugging Face id, every pod that reads the model
  (trainer, engines, proxy) starts with a `stage-model` init container that downloads it once
  onto the job's storage (`ModelSpec.staged_path`); the token Secret reaches only that init
  container. `dressage stage-model` is atomic and a no-op once staged, so the pods can race.
"""

from dressage_operator.children.engine import (
    BASE_WEIGHT_VERSION,
    ENGINE_GENERATE_CHECK,
    ENGINE_GENERATE_TIMEOUT_SECONDS,
    ENGINE_HOME,
    ENGINE_STARTUP_FAILURES,
    ENGINE_STARTUP_PERIOD_SECONDS,
    INITIAL_WEIGHT_VERSION,
    build_engine_pod,
    build_engine_pods,
    engine_base_version,
    engine_command,
    engine_probes,
    engine_urls,
)
from dressage_operator.children.infrastructure import (
    build_config_map,
    build_engine_service,
    build_infrastructure,
    build_network_policy,
    build_proxy_service,
    build_trainer_service,
    runtime_manifest,
)
from dressage_operator.children.pods import (
    COMPUTE_RESOURCES,
    DEFAULT_REQUESTS,
    GPU_RESOURCE,
    PROXY_TOKEN_ENV,
    STAGE_MODEL_CONTAINER,
    STAGING_TOKEN_ENV,
    Obj,
    Owner,
    container_security_context,
    model_path,
    pod_security_context,
    proxy_token_env,
    spec_hash,
    staging_init_containers,
)
from dressage_operator.children.proxy import build_proxy_deployment, proxy_command, proxy_model
from dressage_operator.children.restart import (
    NOT_READ_BY_PODS,
    POD_ONLY,
    engine_inputs,
    engine_spec_hash,
    proxy_inputs,
    proxy_spec_hash,
    trainer_inputs,
    trainer_spec_hash,
)
from dressage_operator.children.trainer import (
    INSTALL_PACKAGES_CONTAINER,
    PACKAGES_VOLUME,
    build_trainer_pods,
    code_env,
    install_packages_command,
    trainer_command,
    trainer_env,
)
from dressage_operator.children.weight_sync import (
    ENGINE_RANK_OFFSET,
    NCCL_ENV,
    WEIGHT_SYNC_ADDRESS_ENV,
    WEIGHT_SYNC_PORT_ENV,
    WeightSyncRendezvous,
    distributed_sync,
    weight_sync_env,
    weight_sync_rendezvous,
)

__all__ = [
    "BASE_WEIGHT_VERSION",
    "COMPUTE_RESOURCES",
    "DEFAULT_REQUESTS",
    "ENGINE_GENERATE_CHECK",
    "ENGINE_GENERATE_TIMEOUT_SECONDS",
    "ENGINE_HOME",
    "ENGINE_RANK_OFFSET",
    "ENGINE_STARTUP_FAILURES",
    "ENGINE_STARTUP_PERIOD_SECONDS",
    "GPU_RESOURCE",
    "INITIAL_WEIGHT_VERSION",
    "INSTALL_PACKAGES_CONTAINER",
    "NCCL_ENV",
    "NOT_READ_BY_PODS",
    "PACKAGES_VOLUME",
    "POD_ONLY",
    "PROXY_TOKEN_ENV",
    "STAGE_MODEL_CONTAINER",
    "STAGING_TOKEN_ENV",
    "WEIGHT_SYNC_ADDRESS_ENV",
    "WEIGHT_SYNC_PORT_ENV",
    "Obj",
    "Owner",
    "WeightSyncRendezvous",
    "build_config_map",
    "build_engine_pod",
    "build_engine_pods",
    "build_engine_service",
    "build_infrastructure",
    "build_network_policy",
    "build_proxy_deployment",
    "build_proxy_service",
    "build_trainer_pods",
    "build_trainer_service",
    "code_env",
    "container_security_context",
    "distributed_sync",
    "engine_base_version",
    "engine_command",
    "engine_inputs",
    "engine_probes",
    "engine_spec_hash",
    "engine_urls",
    "install_packages_command",
    "model_path",
    "pod_security_context",
    "proxy_command",
    "proxy_inputs",
    "proxy_model",
    "proxy_spec_hash",
    "proxy_token_env",
    "runtime_manifest",
    "spec_hash",
    "staging_init_containers",
    "trainer_command",
    "trainer_env",
    "trainer_inputs",
    "trainer_spec_hash",
    "weight_sync_env",
    "weight_sync_rendezvous",
]
