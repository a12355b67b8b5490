"""What a valid job model still cannot run on a cluster is refused, naming the field."""

from __future__ import annotations

import pytest
import yaml
from dressage_operator.decide import decide
from dressage_operator.plan import Observed
from dressage_operator.settle import settle
from dressage_operator.validation import spec_errors

from dressage.api.crd import render_crd
from dressage.api.job import MAX_PROXY_REPLICAS
from dressage.api.status import AsyncRLJobStatus

from .support import CONFIG, NOW, OWNER, condition


def _body(**spec: object) -> dict[str, object]:
    base: dict[str, object] = {
        "model": {"source": "Qwen/Qwen2.5-1.5B-Instruct"},
        "storage": {"persistentVolumeClaim": "shared"},
    }
    base.update(spec)
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "job-a"},
        "spec": base,
    }


def test_a_hub_id_tokenizer_is_refused_because_the_proxy_needs_a_local_one() -> None:
    body = _body(model={"source": "Qwen/Qwen2.5-1.5B-Instruct", "tokenizer": "Qwen/Other"})
    job, errors = spec_errors(body, "ns/job-a")
    assert job is not None
    assert [f for f, _ in errors] == ["spec.model.tokenizer"]
    assert "Qwen/Other" in errors[0][1]


def test_a_job_without_shared_storage_is_refused_naming_the_claim() -> None:
    job, errors = spec_errors(_body(storage={"mountPath": "/data"}), "ns/job-a")
    assert job is not None
    assert [f for f, _ in errors] == ["spec.storage.persistentVolumeClaim"]
    obs = Observed(generation=1, status=AsyncRLJobStatus(), now=NOW, spec_errors=errors)
    out = settle(decide(job, OWNER, CONFIG, obs), obs, CONFIG, [])
    status, reason, message = condition(out.status, "SpecValid")
    assert (status, reason) == ("False", "InvalidSpec")
    assert message.startswith("spec.storage.persistentVolumeClaim: required on a cluster")
    assert spec_errors(_body(), "ns/job-a")[1] == ()


@pytest.mark.parametrize(
    ("nodes", "refused"), [(1, False), (2, True)], ids=["one-node", "two-nodes"]
)
def test_distributed_sync_needs_shared_storage_only_for_a_trainer_of_several_nodes(
    nodes: int, refused: bool
) -> None:
    """The weights go over the network; the storage then holds only the staged model and the
    checkpoints, which a one-node trainer keeps on its own pod."""
    body = _body(
        storage={"mountPath": "/data"},
        inference={"weightSync": "distributed"},
        trainer={"nodes": nodes, "gpusPerNode": 1},
    )
    job, errors = spec_errors(body, "ns/job-a")
    assert job is not None
    assert [f for f, _ in errors] == (["spec.storage.persistentVolumeClaim"] if refused else [])
    if refused:
        assert "spec.trainer.nodes" in errors[0][1]
        assert "model cache and the checkpoint directory" in errors[0][1]


def test_a_lora_job_needs_shared_storage_even_with_distributed_sync() -> None:
    """Its adapters reach the engines through the directory the trainer writes them to."""
    body = _body(
        model={"source": "Qwen/Qwen2.5-1.5B-Instruct", "lora": {"rank": 8}},
        storage={"mountPath": "/data"},
        inference={"weightSync": "distributed"},
        trainer={"nodes": 1, "gpusPerNode": 1},
    )
    _, errors = spec_errors(body, "ns/job-a")
    ((field, message),) = errors
    assert field == "spec.storage.persistentVolumeClaim"
    assert "spec.model.lora" in message


def test_disk_sync_without_storage_names_the_distributed_alternative() -> None:
    _, errors = spec_errors(_body(storage={"mountPath": "/data"}), "ns/job-a")
    ((field, message),) = errors
    assert field == "spec.storage.persistentVolumeClaim"
    assert "spec.inference.weightSync 'disk'" in message
    assert "'distributed'" in message


def test_several_proxy_replicas_are_accepted_up_to_the_cap_and_more_is_named() -> None:
    job, errors = spec_errors(_body(proxy={"replicas": 2}), "ns/job-a")
    assert not errors
    assert job is not None
    assert job.spec.proxy.replicas == 2
    job, errors = spec_errors(_body(proxy={"replicas": MAX_PROXY_REPLICAS + 1}), "ns/job-a")
    assert job is None
    (field, message), *_ = errors
    assert field == "spec.proxy.replicas"
    assert f"at most {MAX_PROXY_REPLICAS}" in message
    _, errors = spec_errors(_body(proxy={"replicas": 0}), "ns/job-a")
    assert errors[0][0] == "spec.proxy.replicas"
    crd = yaml.safe_load(render_crd())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    proxy = schema["properties"]["proxy"]
    assert proxy["properties"]["replicas"]["maximum"] == MAX_PROXY_REPLICAS
    (rule,) = [r for r in proxy["x-kubernetes-validations"] if r["fieldPath"] == ".replicas"]
    assert "every replica pauses" in rule["message"]
