"""The engine pods: SGLang's command line, the weight version an engine starts on, probes."""

from __future__ import annotations

from dressage_operator import children

from dressage.api import AsyncRLJob, load_job
from dressage.api.job import WarmStartSpec
from dressage.data.versions import INITIAL_VERSION

from .support import CONFIG, EXAMPLES, OWNER


def test_engine_flags_and_the_weight_version_an_engine_starts_on() -> None:
    job = load_job(EXAMPLES[0].parent / "multi-node-partial-rollout.yaml")
    engine = children.build_engine_pod(job, OWNER, CONFIG, 1)
    cmd = engine["spec"]["containers"][0]["command"]
    assert cmd[:3] == ["python", "-m", "sglang.launch_server"]
    flags = dict(zip(cmd[3::2], cmd[4::2], strict=False))
    assert flags["--model-path"] == "/dressage/models/Qwen--Qwen3-8B"
    assert flags["--tp-size"] == "2"
    # A fresh engine reports the trainer's label of its initial weights (the data layer's
    # INITIAL_VERSION; the trainer's side is pinned in tests/unit/trainer/test_grpo.py), or the
    # staleness window would take the base model for a version of its own.
    assert flags["--weight-version"] == INITIAL_VERSION == "v0"
    # Engines of a warm-started job start on weights that are not the trainer's v0: their
    # label is one the trainer never issues, so the proxy holds them out until synced.
    warm = job.model_copy(deep=True)
    warm.spec.model.warm_start = WarmStartSpec()
    warm_cmd = children.engine_command(warm)
    assert warm_cmd[warm_cmd.index("--weight-version") + 1] == "base"
    assert cmd[-4:] == ["--mem-fraction-static", "0.85", "--context-length", "32768"]
    assert engine["spec"]["restartPolicy"] == "Always"


def test_seeded_sampling_turns_on_sglangs_deterministic_inference() -> None:
    """Only with a release that has the flag (the job model refuses seededSampling on 0.5.2,
    whose parser has no `--enable-deterministic-inference`), and only when asked for."""
    base = load_job(EXAMPLES[0].parent / "single-node-gpu.yaml").to_wire()
    assert "--enable-deterministic-inference" not in children.engine_command(
        AsyncRLJob.model_validate(base)
    )
    spec = dict(base["spec"])  # type: ignore[arg-type]
    spec["rollout"] = {**spec.get("rollout", {}), "seededSampling": True}
    spec["inference"] = {**spec.get("inference", {}), "sglangVersion": "0.5.3"}
    seeded = children.engine_command(AsyncRLJob.model_validate({**base, "spec": spec}))
    assert seeded.count("--enable-deterministic-inference") == 1


def test_engine_probes_tolerate_model_load_and_weight_update_pauses() -> None:
    """The startup probe proves a generation works and waits out a long model load; liveness
    and readiness never hit SGLang's generation check, which blocks while a weight update
    pauses generation, and no probe times out within the ~1 s that check takes."""
    job = load_job(EXAMPLES[0].parent / "single-node-gpu.yaml")
    (container,) = children.build_engine_pod(job, OWNER, CONFIG, 0)["spec"]["containers"]
    startup = container["startupProbe"]
    assert startup["httpGet"]["path"] in ("/health", "/health_generate")
    assert startup["timeoutSeconds"] > 20  # SGLANG_HEALTH_CHECK_TIMEOUT's default
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 30 * 60
    for kind in ("livenessProbe", "readinessProbe"):
        probe = container[kind]
        assert probe["httpGet"]["path"] not in ("/health", "/health_generate"), kind
        assert probe.get("timeoutSeconds", 1) > 1, kind
        assert probe["periodSeconds"] * probe["failureThreshold"] >= 30, kind
