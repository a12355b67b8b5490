"""`dressage validate`, run in this process through the command's own entry point
(`dressage.cli.main`): the job model alone, and with `--cluster` what a cluster would refuse.

That `--cluster` refuses what the operator refuses, with the message of the job's status, is
checked against the operator itself on the API emulation (tests/operator/test_validate_cluster.py);
here: the report, the exit codes, the operator's settings and a missing operator extra.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import dressage_operator
import pytest
import yaml

from dressage.api.sglang import SGLANG_NEWEST_TESTED
from dressage.cli import main

ROOT = Path(__file__).resolve().parents[2]
SINGLE_NODE_GPU = ROOT / "examples" / "single-node-gpu.yaml"
LOCAL_TINY = ROOT / "examples" / "local-tiny.yaml"


def _manifest(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "job", "labels": {"team": "rl"}},
        "spec": {
            "model": {"source": "org/model"},
            "storage": {"persistentVolumeClaim": "shared"},
            **spec,
        },
    }


def _write(tmp_path: Path, *docs: dict[str, Any]) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all(list(docs)))
    return str(path)


def test_without_cluster_a_local_example_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    """The job model alone: `dressage run` runs it, so it is valid."""
    assert main(["validate", str(LOCAL_TINY)]) == 0
    assert capsys.readouterr().out == f"{LOCAL_TINY}: AsyncRLJob local-tiny is valid\n"


def test_with_cluster_the_local_example_is_refused_naming_the_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["validate", "--cluster", str(LOCAL_TINY)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"{LOCAL_TINY}: AsyncRLJob local-tiny would be refused on a cluster:"
    assert err[1].startswith("  InvalidSpec: the operator fails the job")
    assert err[2].startswith("    spec.storage.persistentVolumeClaim: required on a cluster")


def test_a_valid_manifest_prints_what_was_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["validate", "--cluster", "--kubernetes-version", "v1.30.4", str(SINGLE_NODE_GPU)])
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("is valid on a cluster; checked:")
    checked = "\n".join(out[1:])
    for what in (
        "the job's metadata by the API server's rules",
        "the job model, the CRD's validation rules and what a cluster cannot run",
        "this cluster's limits (gpusPerNode 8, inferenceReplicas 64",
        "against the strict Kubernetes 1.30 schemas and the API server's rules",
        "the pods' Pod Security: they meet 'restricted' (the namespace enforces no level)",
    ):
        assert what in checked, checked


def test_every_refusing_stage_is_reported_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator stops at the first stage that refuses; the offline check names what every
    stage would refuse, so one pass lists all there is to fix: the job object's own metadata
    (the API server refuses it), a limit and a child the API server would refuse."""
    job = _manifest(
        inference={"replicas": 65},
        trainer={"template": {"tolerations": [{"key": "gpu", "operator": "Equals"}]}},
    )
    job["metadata"]["labels"]["bad key!"] = "x"
    assert main(["validate", "--cluster", _write(tmp_path, job)]) == 1
    err = capsys.readouterr().err
    stages = [line.split(":")[0].strip() for line in err.splitlines() if line.startswith("  ")]
    stages = [s for s in stages if not s.startswith(("spec.", "metadata."))]
    assert stages == ["Invalid", "LimitExceeded", "InvalidSpec"], err
    assert "    metadata.labels[bad key!]: " in err
    assert "    spec.inference.replicas: 65 is above this cluster's limit of 64" in err
    assert "    spec.trainer.template.tolerations[0].operator: " in err


def test_the_operators_limits_come_from_its_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`DRESSAGE_OPERATOR_LIMITS`, as the chart's `limits:` set it, raises a limit; a bad
    setting is an error of its own (exit 2)."""
    path = _write(tmp_path, _manifest(inference={"replicas": 65}))
    monkeypatch.setenv("DRESSAGE_OPERATOR_LIMITS", '{"inferenceReplicas": 128}')
    assert main(["validate", "--cluster", path]) == 0
    assert "inferenceReplicas 128" in capsys.readouterr().out
    monkeypatch.setenv("DRESSAGE_OPERATOR_LIMITS", '{"engines": 1}')
    assert main(["validate", "--cluster", path]) == 2
    assert "unknown limit 'engines'" in capsys.readouterr().err


def test_a_relaxed_role_is_refused_only_where_the_namespace_enforces_restricted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    relaxed = {"template": {"security": {"profile": "baseline"}}}
    path = _write(tmp_path, _manifest(inference=relaxed))
    assert main(["validate", "--cluster", path]) == 0
    assert "they meet 'baseline'" in capsys.readouterr().out
    assert main(["validate", "--cluster", "--pod-security", "baseline", path]) == 0
    capsys.readouterr()
    assert main(["validate", "--cluster", "--pod-security", "restricted", path]) == 1
    err = capsys.readouterr().err
    assert "  ChildRefused: the API server refuses a child" in err
    assert (
        "    spec.inference.template.security: Pod job-engine-0: create refused (HTTP 403): "
        'pods "job-engine-0" is forbidden: violates PodSecurity "restricted:latest": '
    ) in err


def test_an_untested_sglang_release_is_a_warning_not_a_refusal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = ".".join([*SGLANG_NEWEST_TESTED.split(".")[:2], "999"])
    job = _manifest(inference={"sglangVersion": newer, "image": "example.com/sglang:custom"})
    assert main(["validate", "--cluster", _write(tmp_path, job)]) == 0
    captured = capsys.readouterr()
    assert "is valid on a cluster" in captured.out
    assert f"warning: SGLang {newer}" in captured.err


def test_each_job_of_a_file_is_checked_and_other_kinds_are_left_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "shared"}}
    second = _manifest()
    second["metadata"]["name"] = "second"
    assert main(["validate", "--cluster", _write(tmp_path, claim, _manifest(), second)]) == 0
    out = capsys.readouterr().out
    assert "AsyncRLJob job is valid" in out
    assert "AsyncRLJob second is valid" in out


def test_a_file_without_a_job_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "shared"}}
    assert main(["validate", "--cluster", _write(tmp_path, claim)]) == 1
    assert "no document of kind AsyncRLJob" in capsys.readouterr().err


def test_without_the_operator_extra_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator's checks read the Kubernetes schemas with `kubernetes-validate` (the
    operator extra): without it, exit 2 and the install command."""
    monkeypatch.delattr(dressage_operator, "cluster_check", raising=False)
    monkeypatch.setitem(sys.modules, "dressage_operator.cluster_check", None)
    assert main(["validate", "--cluster", str(SINGLE_NODE_GPU)]) == 2
    err = capsys.readouterr().err
    assert "need the operator extra" in err
    assert "pip install 'dressage[operator]'" in err
