"""Every example under `examples/` runs as written, or says in its header what it needs.

An example's header (its leading comment) says how it is run:

- `kubectl apply -f examples/NAME.yaml`: a cluster job. The operator's validation accepts it
  as written, every child the operator would create passes the Kubernetes schemas, and the
  header names what the job asks of the cluster: GPUs when a pod asks for one, the claim by
  name when it names one. The one that needs nothing (`kind-cpu.yaml`) runs end to end on
  the emulation (`tests/operator/test_cluster_kind_example.py`).
- `dressage run examples/NAME.yaml`: a local job (the integration tier runs them). Where the
  operator would refuse it, the header says so with "On a cluster" and names the example to
  apply instead.
"""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from dressage_operator.validation import spec_errors

from dressage.api import load_job

from .children.support import EXAMPLES, K8S_VERSION, all_children

EXAMPLE_DIR = EXAMPLES[0].parent


def _header(path: Path) -> str:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# "))
    return " ".join(lines)


def _refusals(path: Path) -> list[tuple[str, str]]:
    _, errors = spec_errors(yaml.safe_load(path.read_text()), path.name)
    return list(errors)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_the_example_says_how_it_runs_and_runs_so(example: Path) -> None:
    header = _header(example)
    applied = f"kubectl apply -f examples/{example.name}" in header
    local = f"dressage run examples/{example.name}" in header
    assert applied or local, f"{example.name}: the header says neither how to apply nor run it"
    refusals = _refusals(example)
    if applied:
        assert refusals == [], f"{example.name}: the operator refuses it: {refusals}"
        return
    if refusals:
        assert "On a cluster" in header, (
            f"{example.name} is refused on a cluster ({refusals[0][0]}) and its header does "
            "not say so ('On a cluster ...')"
        )
        named = re.findall(r"examples/([\w.-]+\.yaml)", header.split("On a cluster", 1)[1])
        instead = [n for n in named if n != example.name]
        assert instead, f"{example.name}: 'On a cluster' names no example to apply instead"
        for name in instead:
            assert f"kubectl apply -f examples/{name}" in _header(EXAMPLE_DIR / name), name


CLUSTER_EXAMPLES = [p for p in EXAMPLES if f"kubectl apply -f examples/{p.name}" in _header(p)]


@pytest.mark.parametrize("example", CLUSTER_EXAMPLES, ids=lambda p: p.name)
def test_a_cluster_example_names_what_it_needs_and_its_children_pass_the_schemas(
    example: Path,
) -> None:
    header = _header(example)
    job = load_job(example)
    spec = job.spec
    gpus = spec.trainer.gpus_per_node > 0 or spec.inference.engine == "sglang"
    if gpus:
        assert "GPU" in header, f"{example.name} runs on GPUs and its header does not say so"
    claim = spec.storage.persistent_volume_claim
    if claim:
        assert claim in header, f"{example.name} needs the claim {claim}, unnamed in its header"
    else:
        assert "no claim" in header, f"{example.name}: say that it needs no claim"
    for obj in all_children(job):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_cluster_examples_include_one_without_gpus_or_claims() -> None:
    kind = load_job(EXAMPLE_DIR / "kind-cpu.yaml").spec
    assert EXAMPLE_DIR / "kind-cpu.yaml" in CLUSTER_EXAMPLES
    assert kind.inference.engine == "embedded"
    assert kind.trainer.gpus_per_node == 0
    assert kind.storage.persistent_volume_claim is None


STORAGE = sorted((EXAMPLE_DIR / "storage").glob("*.yaml"))


@pytest.mark.parametrize("claim_file", STORAGE, ids=lambda p: p.name)
def test_each_storage_example_is_the_readwritemany_claim_the_gpu_examples_name(
    claim_file: Path,
) -> None:
    """Each file makes the claim `dressage-shared` for one kind of file storage, names its
    class (never the cluster's default, which is block storage) and says how it is applied."""
    objects = [o for o in yaml.safe_load_all(claim_file.read_text()) if o]
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    (pvc,) = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"].get("storageClassName"), f"{claim_file.name} names no storage class"
    named = {load_job(p).spec.storage.persistent_volume_claim for p in CLUSTER_EXAMPLES}
    assert named - {None} == {pvc["metadata"]["name"]}
    classes = {o["metadata"]["name"] for o in objects if o["kind"] == "StorageClass"}
    if classes:
        assert pvc["spec"]["storageClassName"] in classes
    assert f"kubectl apply -n NAMESPACE -f examples/storage/{claim_file.name}" in _header(
        claim_file
    )


def test_the_gpu_examples_send_the_reader_to_every_storage_example() -> None:
    header = _header(EXAMPLE_DIR / "small-gpu.yaml")
    assert "kubectl apply -f examples/storage/FILE.yaml" in header
    for claim_file in STORAGE:
        assert claim_file.stem in header, f"small-gpu.yaml does not list {claim_file.name}"
    assert len(STORAGE) >= 6  # GKE, EKS, AKS and the generic NFS, CephFS and Longhorn


_GPU_PRODUCT = re.compile(r"labelled (nvidia\.com/gpu\.product)=([\w.-]+)")


@pytest.mark.parametrize("example", CLUSTER_EXAMPLES, ids=lambda p: p.name)
def test_every_gpu_pod_selects_the_nodes_its_header_promises(example: Path) -> None:
    """A header that names the GPU nodes' label holds for every pod that asks for a GPU."""
    promised = _GPU_PRODUCT.search(_header(example))
    if promised is None:
        return
    label, value = promised.groups()
    for obj in all_children(load_job(example)):
        if obj["kind"] != "Pod":
            continue
        gpus = [
            c
            for c in obj["spec"]["containers"]
            if "nvidia.com/gpu" in c.get("resources", {}).get("limits", {})
        ]
        if gpus:
            selector = obj["spec"].get("nodeSelector", {})
            assert selector.get(label) == value, (
                f"{example.name}: pod {obj['metadata']['name']} asks for a GPU and does not "
                f"select {label}={value}"
            )
