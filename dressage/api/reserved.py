"""Names the operator owns in a job's pods: environment variables, engine flags, directories.

The job model refuses a manifest that sets one of them itself (`template.env`,
`inference.extraArgs`, `trainer.template.env` beside `spec.code`), and the operator's builders
set exactly these, so the two cannot drift apart unnoticed (a test compares them).
"""

from __future__ import annotations

OPERATOR_ENV = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "NNODES",
        "NPROC_PER_NODE",
        "WORLD_SIZE",
        "NODE_RANK",
        "RANK",
        "LOCAL_RANK",
        "DRESSAGE_JOB_CONFIG",
        "DRESSAGE_ENGINE_URLS",
        "DRESSAGE_ENGINE_URL",
        "DRESSAGE_PROXY_URL",
        "DRESSAGE_METRICS_PORT",
        "DRESSAGE_WORKDIR",
        "DRESSAGE_ROLLOUT_MAX_RETRIES",
        "HOME",
        "DRESSAGE_PROXY_TOKEN",
        "DRESSAGE_WEIGHT_SYNC_ADDRESS",
        "DRESSAGE_WEIGHT_SYNC_PORT",
    }
)
"""Environment variables the operator (or torchrun) sets in a job's pods: the rendezvous, the
wiring between trainer, engines and proxy (the weight-update groups' meeting point among it),
the engines' writable home and the proxy token
(from `proxy.tokenSecret`, never a plain value that would land in the job's ConfigMap). A job's
`template.env` cannot override them."""
OPERATOR_ENGINE_FLAGS = {
    "--model-path": "set spec.model.source",
    "--model": "set spec.model.source",
    "--tokenizer-path": "set spec.model.tokenizer",
    "--tp-size": "set spec.inference.tensorParallelSize",
    "--tp": "set spec.inference.tensorParallelSize",
    "--tensor-parallel-size": "set spec.inference.tensorParallelSize",
    "--dtype": "set spec.model.dtype",
    "--host": "the engine listens on 0.0.0.0",
    "--port": "the engine Service's port is fixed",
    "--weight-version": "the trainer stamps weight versions",
    "--enable-metrics": "metrics are always on",
    "--enable-deterministic-inference": "set spec.rollout.seededSampling",
    "--enable-return-routed-experts": "set spec.rollout.routingReplay",
    "--enable-lora": "set spec.model.lora",
    "--max-lora-rank": "set spec.model.lora.rank",
    "--lora-target-modules": "set spec.model.lora.targetModules",
    "--max-loras-per-batch": "the adapters each engine keeps are fixed (spec.model.lora)",
    "--uvicorn-access-log-exclude-prefixes": (
        "the operator keeps the probes', the proxy's and Prometheus' requests out of the "
        "access log, from SGLang 0.5.8"
    ),
}
"""SGLang flags the operator puts on the engine command line, with what to do instead."""

PACKAGES_DIR = "/opt/dressage/packages"
"""Where the trainer pods' `install-packages` init container installs `spec.code.packages`
(`pip install --user` with this as `PYTHONUSERBASE`, an emptyDir shared with the trainer)."""
CODE_ENV = ("PYTHONPATH", "PYTHONUSERBASE")
"""Variables the operator sets on the trainer pods when `spec.code` is set."""
