"""The API server's validation rules for the fields a job's children carry, each pinned with
the upstream function it comes from (`pkg/apis/core/validation/validation.go` unless named)
and its wording."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from dressage_operator.apirules import Key, format_path, object_causes, pod_spec_causes
from dressage_operator.apirules.fields import (
    dns1123_label_problems,
    dns1123_subdomain_problems,
    label_key_problems,
    label_value_problems,
)

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "labels": {"app.kubernetes.io/name": "dressage"}},
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "env": [{"name": "MY_ENV.NAME-1", "value": "x"}],
                "resources": {
                    "requests": {"cpu": "500m", "nvidia.com/gpu": "1"},
                    "limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                },
                "volumeMounts": [{"name": "data", "mountPath": "/data", "subPath": "a/b"}],
            }
        ],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "shared"}}],
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "spot", "operator": "Equal", "value": "true", "effect": "NoExecute",
             "tolerationSeconds": 30},
            {"operator": "Exists"},
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [
                            {"key": "zone", "operator": "In", "values": ["a", "b"]},
                            {"key": "gpus", "operator": "Gt", "values": ["3"]},
                            {"key": "spot", "operator": "DoesNotExist"},
                        ]}
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 50, "preference": {"matchExpressions": [
                        {"key": "tier", "operator": "In", "values": ["not a label value"]}
                    ]}}
                ],
            },
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": {
                        "labelSelector": {"matchLabels": {"dressage.io/job": "j"}},
                        "topologyKey": "kubernetes.io/hostname",
                    }}
                ]
            },
        },
        "priorityClassName": "high-priority",
        "hostname": "j-trainer-0",
        "subdomain": "j-trainer",
    },
}  # fmt: skip


def _with(path: str, value: Any) -> dict[str, Any]:
    """POD with the value at a dotted path (`spec.tolerations.0.operator`) set."""
    pod = copy.deepcopy(POD)
    node: Any = pod
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return pod


def test_a_pod_as_the_operator_renders_it_has_no_cause() -> None:
    assert object_causes(POD) == []


CASES = [
    # ValidateVolumes: DNS-1123 label names, unique, exactly one type, a claim name.
    ("spec.volumes.0.name", "Scratch", "spec.volumes[0].name",
     'Invalid value: "Scratch": a lowercase RFC 1123 label must consist of lower case'),
    ("spec.volumes", [{"name": "data"}], "spec.volumes[0]",
     "Required value: must specify a volume type"),
    ("spec.volumes", [{"name": "data", "emptyDir": {}, "configMap": {"name": "c"}}],
     "spec.volumes[0].configMap", "Forbidden: may not specify more than 1 volume type"),
    ("spec.volumes.0.persistentVolumeClaim", {}, "spec.volumes[0].persistentVolumeClaim.claimName",
     "Required value"),
    # ValidateVolumeMounts.
    ("spec.containers.0.volumeMounts.0.mountPath", "",
     "spec.containers[0].volumeMounts[0].mountPath", "Required value"),
    ("spec.containers.0.volumeMounts.0.name", "cache", "spec.containers[0].volumeMounts[0].name",
     'Not found: "cache"'),
    ("spec.containers.0.volumeMounts.0.subPath", "../up",
     "spec.containers[0].volumeMounts[0].subPath", "must not contain '..'"),
    ("spec.containers.0.volumeMounts.0.subPath", "/abs",
     "spec.containers[0].volumeMounts[0].subPath", "must be a relative path"),
    # validateContainerCommon, ValidateEnv (IsEnvVarName with hasChDirPrefix).
    ("spec.containers.0.image", " busybox", "spec.containers[0].image",
     "must not have leading or trailing whitespace"),
    ("spec.containers.0.env.0.name", "..hidden", "spec.containers[0].env[0].name",
     "must not start with '..'"),
    # ValidateResourceRequirements, validateContainerResourceName, ValidateResourceQuantityValue.
    ("spec.containers.0.resources.requests.cpu", "2", "spec.containers[0].resources.requests",
     'Invalid value: "2": must be less than or equal to cpu limit of 1'),
    ("spec.containers.0.resources.requests", {"nvidia.com/gpu": "2"},
     "spec.containers[0].resources.requests",
     'Invalid value: "2": must be equal to nvidia.com/gpu limit of 1'),
    ("spec.containers.0.resources.limits", {"cpu": "1"},
     "spec.containers[0].resources.limits",
     "Required value: Limit must be set for non overcommitable resources"),
    ("spec.containers.0.resources", {"limits": {"nvidia.com/gpu": "0.5"}},
     "spec.containers[0].resources.limits[nvidia.com/gpu]", "must be an integer"),
    ("spec.containers.0.resources.limits.cpu", "-1", "spec.containers[0].resources.limits[cpu]",
     "must be greater than or equal to 0"),
    ("spec.containers.0.resources.limits", {"gpu": "1"}, "spec.containers[0].resources.limits[gpu]",
     "must be a standard resource for containers"),
    ("spec.containers.0.resources", {"limits": {"hugepages-2Mi": "1Gi"}},
     "spec.containers[0].resources", "Forbidden: HugePages require cpu or memory"),
    # ValidatePodSpec: nodeSelector as labels, priorityClassName, hostname.
    ("spec.nodeSelector", {"gpu type": "a100"}, "spec.nodeSelector[gpu type]",
     'Invalid value: "gpu type": name part must consist of alphanumeric characters'),
    ("spec.nodeSelector", {"zone": "x" * 64}, "spec.nodeSelector[zone]",
     "must be no more than 63 bytes"),
    ("spec.priorityClassName", "High_Priority", "spec.priorityClassName",
     'Invalid value: "High_Priority": a lowercase RFC 1123 subdomain must consist of'),
    ("spec.hostname", "a.b", "spec.hostname", "must not contain dots"),
    # ValidateTolerations.
    ("spec.tolerations.0.operator", "Equals", "spec.tolerations[0].operator",
     'Unsupported value: "Equals": supported values: "Equal", "Exists"'),
    ("spec.tolerations.0.effect", "NoRun", "spec.tolerations[0].effect",
     'Unsupported value: "NoRun": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"'),
    ("spec.tolerations.1.effect", "NoSchedule", "spec.tolerations[1].effect",
     "effect must be 'NoExecute' when `tolerationSeconds` is set"),
    ("spec.tolerations.2", {"operator": "Equal"}, "spec.tolerations[2].operator",
     "operator must be Exists when `key` is empty"),
    ("spec.tolerations.0.value", "yes", "spec.tolerations[0].operator",
     "value must be empty when `operator` is 'Exists'"),
    ("spec.tolerations.0.key", "a/b/c", "spec.tolerations[0].key",
     "with an optional DNS subdomain prefix and '/'"),
    # validateAffinity: ValidateNodeSelectorRequirement, terms, weights, pod affinity terms.
    ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.0"
     ".matchExpressions.0.values", [],
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
     "[0].matchExpressions[0].values",
     "Required value: must be specified when `operator` is 'In' or 'NotIn'"),
    ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.0"
     ".matchExpressions.0.operator", "in",
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
     "[0].matchExpressions[0].operator", 'Invalid value: "in": not a valid selector operator'),
    ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.0"
     ".matchExpressions.1.values", ["3", "4"],
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
     "[0].matchExpressions[1].values",
     "must be specified single value when `operator` is 'Lt' or 'Gt'"),
    ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms.0"
     ".matchExpressions.2.values", ["x"],
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
     "[0].matchExpressions[2].values",
     "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"),
    ("spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms",
     [], "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
     ".nodeSelectorTerms", "Required value: must have at least one node selector term"),
    ("spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution.0.weight", 0,
     "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
     "Invalid value: 0: must be in the range 1-100"),
    ("spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.0"
     ".podAffinityTerm.topologyKey", "",
     "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
     ".podAffinityTerm.topologyKey", "Required value: can not be empty"),
    # ValidateLabels and ValidateAnnotations (apimachinery).
    ("metadata.labels", {"team": "a b"}, "metadata.labels[team]",
     "a valid label must be an empty string or consist of alphanumeric characters"),
    ("metadata.annotations", {"prometheus io/scrape": "true"},
     "metadata.annotations[prometheus io/scrape]", "prefix part a lowercase RFC 1123 subdomain"),
    ("metadata.annotations", {"a": "x" * 262144}, "metadata.annotations",
     "Too long: may not be more than 262144 bytes"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "value", "field", "message"), CASES)
def test_each_rule_names_the_field_with_the_api_servers_words(
    path: str, value: Any, field: str, message: str
) -> None:
    causes = [(c.field, c.message) for c in object_causes(_with(path, value))]
    assert any(f == field and message in m for f, m in causes), causes


def test_preferred_node_affinity_may_name_label_values_no_node_has() -> None:
    """`ValidatePreferredSchedulingTerms` allows invalid label values (upstream: they can
    succeed when the cluster has one node); the required ones may not."""
    assert object_causes(POD) == []
    required = _with(
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms.0.matchExpressions.0.values",
        ["not a label value"],
    )
    assert [c.field for c in object_causes(required)] == [
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
        ".nodeSelectorTerms[0].matchExpressions[0].values[0]"
    ]


def test_a_mount_of_an_invalid_volume_is_not_found_either() -> None:
    """Only valid volumes are mountable (`ValidateVolumes` returns those)."""
    pod = _with("spec.volumes.0.name", "Data")
    pod["spec"]["containers"][0]["volumeMounts"][0]["name"] = "Data"
    fields = [c.field for c in object_causes(pod)]
    assert fields == ["spec.volumes[0].name", "spec.containers[0].volumeMounts[0].name"]


def test_a_quantity_outside_the_grammar_is_a_decoding_error() -> None:
    pod = _with("spec.containers.0.resources.limits.memory", "1 Gi")
    (cause,) = object_causes(pod)
    assert (cause.reason, cause.field) == (
        "BadRequest",
        "spec.containers[0].resources.limits[memory]",
    )


def test_a_deployments_pod_template_is_checked_at_its_path() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d"},
        "spec": {"template": {"metadata": {"labels": {"a": "-"}}, "spec": POD["spec"]}},
    }
    deployment["spec"]["template"]["spec"] = _with("spec.priorityClassName", "X")["spec"]
    assert [c.field for c in object_causes(deployment)] == [
        "spec.template.metadata.labels[a]",
        "spec.template.spec.priorityClassName",
    ]
    assert pod_spec_causes(POD["spec"]) == []


@pytest.mark.parametrize(
    ("key", "problems"),
    [
        ("app", []),
        ("example.com/app", []),
        ("a" * 63, []),
        ("a" * 64, ["name part must be no more than 63 bytes"]),
        ("/app", ["prefix part must be non-empty"]),
        ("example.com/", ["name part must be non-empty"]),
        ("Example.com/app", ["prefix part a lowercase RFC 1123 subdomain"]),
    ],
)
def test_label_keys_are_qualified_names(key: str, problems: list[str]) -> None:
    """`IsLabelKey` (apimachinery `api/validate/content/kube.go`)."""
    found = label_key_problems(key)
    assert len(found) >= len(problems)
    for problem, message in zip(problems, found, strict=False):
        assert message.startswith(problem)
    if not problems:
        assert found == []


def test_label_values_dns_labels_and_subdomains() -> None:
    assert label_value_problems("") == []
    assert label_value_problems("a-b_c.d") == []
    assert label_value_problems("-a")[0].startswith("a valid label must be an empty string")
    assert dns1123_label_problems("a-b") == []
    assert dns1123_label_problems("a" * 64) == ["must be no more than 63 bytes"]
    assert dns1123_subdomain_problems("a.b-c") == []
    assert dns1123_subdomain_problems("A")[0].endswith(
        "(e.g. 'example.com', regex used for validation is "
        "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
    )
    # RegexError's examples are joined as upstream joins them.
    assert "(e.g. 'my-name',  or '123-abc', regex" in dns1123_label_problems("A")[0]


def test_field_paths_are_written_as_the_api_server_writes_them() -> None:
    path = ("spec", "containers", 0, "resources", "requests", Key("cpu"))
    assert format_path(path) == "spec.containers[0].resources.requests[cpu]"
