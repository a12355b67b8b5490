"""The restart policy: each role's hash covers what its pods run from the job's spec, and only
that. The proxy's is derived from the very settings the proxy reads from `job.yaml`."""

from __future__ import annotations

from typing import Any

from dressage_operator.children import restart
from hypothesis import given, settings
from hypothesis import strategies as st

from dressage.api import AsyncRLJob, validate_job
from dressage.api.proxy_settings import proxy_settings


def _job(spec: dict[str, Any]) -> AsyncRLJob:
    return validate_job(
        {
            "apiVersion": "dressage.io/v1alpha1",
            "kind": "AsyncRLJob",
            "metadata": {"name": "job-a"},
            "spec": spec,
        }
    )


@st.composite
def _proxy_relevant_specs(draw: st.DrawFn) -> dict[str, Any]:
    """Specs that vary what the proxy reads and what it does not (the trainer's settings, the
    engine count, the model source behind a tokenizer)."""
    partial = draw(st.booleans())
    model: dict[str, Any] = {"source": draw(st.sampled_from(["/m/a", "/m/b", "builtin:tiny"]))}
    tokenizer = draw(st.sampled_from([None, "/m/tok", "/m/a"]))
    if tokenizer is not None:
        model["tokenizer"] = tokenizer
    spec: dict[str, Any] = {
        "model": model,
        "rollout": {"mode": draw(st.sampled_from(["fully_async", "partial_async"]))},
        "proxy": {
            "partialRollout": partial,
            "recordTokenVersions": draw(st.booleans()),
            "maxConcurrency": draw(st.sampled_from([256, 512])),
        },
        "training": {"learningRate": draw(st.sampled_from([1e-5, 3e-5]))},
        "inference": {"replicas": draw(st.integers(1, 3))},
    }
    if partial or spec["rollout"]["mode"] == "partial_async":
        preempts = draw(st.sampled_from([None, 0, 2]))
        if preempts is not None:
            spec["staleness"] = {"maxPartialRolloutPreempts": preempts}
    return spec


@settings(max_examples=60, deadline=None)
@given(_proxy_relevant_specs(), _proxy_relevant_specs())
def test_the_proxy_hash_changes_exactly_when_the_proxy_settings_do(
    a: dict[str, Any], b: dict[str, Any]
) -> None:
    job_a, job_b = _job(a), _job(b)
    same_settings = proxy_settings(job_a) == proxy_settings(job_b)
    same_hash = restart.proxy_spec_hash(job_a) == restart.proxy_spec_hash(job_b)
    assert same_hash == same_settings


def test_every_hash_is_computed_from_the_job_it_is_given() -> None:
    """No cache outlives its job: a job object changed in place hashes anew."""
    job = _job({"model": {"source": "builtin:tiny"}})
    before = (
        restart.trainer_spec_hash(job),
        restart.engine_spec_hash(job),
        restart.proxy_spec_hash(job),
    )
    job.spec.training.learning_rate = 3e-5
    job.spec.inference.tensor_parallel_size = 2
    job.spec.proxy.max_concurrency = 512
    after = (
        restart.trainer_spec_hash(job),
        restart.engine_spec_hash(job),
        restart.proxy_spec_hash(job),
    )
    assert all(x != y for x, y in zip(before, after, strict=True))
