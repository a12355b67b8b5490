"""Image references are checked against the grammar the kubelet parses them with
(`github.com/distribution/reference`, `go-digest`), so a job the kubelet would fail with
`InvalidImageName` is refused when its manifest is read, naming the field: by `dressage run`,
by the operator, and by the API server through the CRD's pattern."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from dressage.api import JobValidationError, validate_job
from dressage.api.crd import build_crd
from dressage.api.images import IMAGE_REFERENCE_PATTERN, image_reference_problem
from dressage.runner.cli import run

VALID = [
    "busybox",
    "python:3.11.13-slim-bookworm",
    "ghcr.io/dressage/dressage-runtime:0.1.0",
    "lmsysorg/sglang:v0.5.2-cu126",
    "nvcr.io/nvidia/pytorch:24.01-py3",
    "localhost/app",
    "localhost:5000/team/app:Tag_1",
    "registry:5000/app",
    "[::1]:5000/app:1",
    "Registry.Example.com/team/app",  # a registry host may have upper case
    "docker.io/library/busybox@sha256:" + "a" * 64,
    "app:1.0@sha512:" + "0" * 128,
    "a__b/c--d/e.f_g:" + "x" * 128,
]
INVALID = [
    ("ghcr.io/Dressage/runtime:0.1.0", "repository name 'Dressage/runtime' must be lower case"),
    ("Dressage/runtime", "repository name 'Dressage/runtime' must be lower case"),
    ("dressage-runtime:0.1 ", "contains whitespace"),
    ("ghcr.io/dressage/runtime: 1", "contains whitespace"),
    ("app@sha256:abc123", "the sha256 digest must have 64 hex digits, not 6"),
    ("app@sha256:" + "A" * 64, "must be lower-case hex digits"),
    ("app@md5:" + "a" * 32, "digest algorithm 'md5' is not one the kubelet knows"),
    ("app@sha256", "digest 'sha256' is not '<algorithm>:<hex>'"),
    ("app:" + "x" * 129, "tag is 129 characters long, more than 128"),
    ("app:-rc1", "tag '-rc1' must be 1 to 128 letters"),
    ("app:", "tag '' must be"),
    ("a" * 64, "is a 64-digit hex image id, not a reference"),
    ("", "must not be empty"),
    ("/app", "is not an image reference"),
    ("team//app", "is not an image reference"),
    ("team/app_", "is not an image reference"),
    ("ghcr..io/team/app", "registry 'ghcr..io' is not a host name"),
    ("x/" + "a" * 256, "repository name is longer than 255 characters"),
]
_CRD_PATTERN = re.compile(IMAGE_REFERENCE_PATTERN)
MODEL_ONLY = {"a" * 64, "x/" + "a" * 256}
"""Refused by the model's rules beyond the pattern (a regular expression without lookahead,
as the API server's are, cannot say them): a bare image id, a path over 255 characters."""


@pytest.mark.parametrize("image", VALID)
def test_references_the_kubelet_parses_are_accepted(image: str) -> None:
    assert image_reference_problem(image) is None
    assert _CRD_PATTERN.match(image)


@pytest.mark.parametrize(("image", "problem"), INVALID)
def test_references_the_kubelet_cannot_parse_are_refused_saying_why(
    image: str, problem: str
) -> None:
    found = image_reference_problem(image)
    assert found is not None
    assert problem in found
    # The CRD's pattern refuses the same at `kubectl apply`.
    assert bool(_CRD_PATTERN.match(image)) is (image in MODEL_ONLY)


@pytest.mark.parametrize("role", ["trainer", "inference", "proxy"])
def test_every_role_image_is_checked_naming_the_field(role: str) -> None:
    manifest = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "job-a"},
        "spec": {"model": {"source": "builtin:tiny"}, role: {"image": "ghcr.io/Org/img:1"}},
    }
    with pytest.raises(JobValidationError) as info:
        validate_job(manifest)
    ((field, message),) = info.value.errors
    assert field == f"spec.{role}.image"
    assert "repository name 'Org/img' must be lower case" in message


def test_the_crd_carries_the_pattern_for_every_image() -> None:
    crd = build_crd()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for role in ("trainer", "inference", "proxy"):
        image = spec["properties"][role]["properties"]["image"]
        assert image["pattern"] == IMAGE_REFERENCE_PATTERN


def test_dressage_run_refuses_an_upper_case_image_before_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "job.yaml"
    job = {
        "apiVersion": "dressage.io/v1alpha1",
        "kind": "AsyncRLJob",
        "metadata": {"name": "upper"},
        "spec": {
            "model": {"source": "builtin:tiny"},
            "trainer": {"image": "ghcr.io/Dressage/dressage-runtime:0.1.0"},
        },
    }
    manifest.write_text(yaml.safe_dump(job), encoding="utf-8")
    args = argparse.Namespace(manifest=str(manifest), steps=None, workdir=tmp_path, fresh=False)
    assert run(args) == 2
    err = capsys.readouterr().err
    assert (
        "spec.trainer.image: repository name 'Dressage/dressage-runtime' must be lower case" in err
    )
