"""The Helm chart rendered by the real helm binary: lint, template, Kubernetes schemas, content.

Every rendered object of a built-in kind passes `kubernetes_validate` in strict mode (unknown
fields refused). ServiceMonitor, PodMonitor and PrometheusRule are custom resources of the
Prometheus Operator whose schemas kubernetes-validate does not ship; they are checked
structurally here (apiVersion, kind, the fields the Prometheus Operator requires), and the
PrometheusRule's rules by promtool in test_alert_rules.py.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from dressage_operator import children, naming, rbac
from dressage_operator import main as operator_main
from dressage_operator.config import OperatorConfig
from dressage_testkit.kube import restricted_violations

from dressage.api import load_job
from tests.chart.tools import (
    CHART,
    NAMESPACE,
    RELEASE,
    ROOT,
    by_kind,
    helm_template,
    one,
    render,
    require_tool,
    run_tool,
)

K8S_VERSION = "1.33.0"
MONITORING = "monitoring.coreos.com/v1"
PROMETHEUS_OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
KUBE_PROMETHEUS = {"release": "kube-prometheus-stack"}

# Named values combinations: each is linted, rendered and validated.
COMBINATIONS: dict[str, dict[str, Any]] = {
    "default": {},
    "monitoring": {
        "metrics": {
            "serviceMonitor": {"enabled": True, "additionalLabels": KUBE_PROMETHEUS},
            "podMonitor": {"enabled": True, "additionalLabels": KUBE_PROMETHEUS},
        },
        "grafanaDashboard": {"enabled": True, "namespace": "monitoring", "folder": "Dressage"},
        "prometheusRule": {
            "enabled": True,
            "additionalLabels": KUBE_PROMETHEUS,
            "additionalAlertLabels": {"team": "rl"},
        },
    },
    "single-namespace": {
        "singleNamespace": True,
        "watchNamespace": "team-a",
        "metrics": {"podMonitor": {"enabled": True}},
    },
    "network-policies": {"networkPolicy": {"enabled": True}},
    "bring-your-own-rbac": {
        "rbac": {"create": False},
        "serviceAccount": {"create": False, "name": "dressage-sa"},
        "metrics": {"service": {"enabled": False}},
    },
    "overrides": {
        "fullnameOverride": "rl-operator",
        "image": {"repository": "registry.example.com/dressage-operator", "tag": "1.2.3"},
        "imagePullSecrets": [{"name": "regcred"}],
        "jobImages": {"sglang": {"repository": "registry.example.com/sglang", "tag": "0.5"}},
        "nodeSelector": {"node-role": "system"},
        "tolerations": [{"key": "system", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpu", "operator": "DoesNotExist"}]}
                    ]
                }
            }
        },
        "extraArgs": ["--verbose"],
        "extraEnv": [{"name": "EXTRA", "value": "1"}],
        "priorityClassName": "system-cluster-critical",
        "resources": {"requests": {"cpu": "200m", "memory": "512Mi"}},
        "serviceAccount": {"annotations": {"iam.example.com/role": "dressage"}},
        "rbac": {"extraRules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]},
        "grafanaDashboard": {
            "enabled": True,
            "sidecarLabel": "grafana.example.com/dashboard",
            "sidecarLabelValue": "dressage",
        },
    },
}


def _values_file(tmp_path: Path, values: dict[str, Any]) -> Path:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_helm_lint_strict_passes(name: str, tmp_path: Path) -> None:
    helm = require_tool("helm")
    values = _values_file(tmp_path, COMBINATIONS[name])
    result = run_tool([helm, "lint", "--strict", str(CHART), "-f", str(values)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def _validate_structurally(obj: dict[str, Any]) -> None:
    """What the Prometheus Operator requires of its custom resources."""
    assert obj["apiVersion"] == MONITORING
    assert obj["metadata"]["name"]
    spec = obj["spec"]
    if obj["kind"] == "ServiceMonitor":
        assert spec["selector"]["matchLabels"]
        assert all(e["port"] for e in spec["endpoints"])
    elif obj["kind"] == "PodMonitor":
        assert spec["selector"]["matchLabels"]
        assert all(e["port"] for e in spec["podMetricsEndpoints"])
    else:
        for group in spec["groups"]:
            assert group["name"]
            for rule in group["rules"]:
                assert rule["alert"]
                assert rule["expr"].strip()


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_every_rendered_object_is_valid(name: str, tmp_path: Path) -> None:
    objects = render(COMBINATIONS[name], tmp_path, include_crds=True)
    assert objects
    for obj in objects:
        if obj["kind"] in PROMETHEUS_OPERATOR_KINDS:
            _validate_structurally(obj)
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def _pod_specs(objects: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    specs = [
        (d["metadata"]["name"], d["spec"]["template"]["spec"])
        for d in by_kind(objects, "Deployment")
    ]
    specs += [(p["metadata"]["name"], p["spec"]) for p in by_kind(objects, "Pod")]
    return specs


def test_restricted_violations_detects_a_root_privileged_pod() -> None:
    pod = {
        "hostNetwork": True,
        "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
        "containers": [{"name": "c", "securityContext": {"privileged": True, "runAsUser": 0}}],
    }
    problems = restricted_violations(pod)
    assert any("hostNetwork" in p for p in problems)
    assert any("hostPath" in p for p in problems)
    assert any("privileged" in p for p in problems)
    assert any("runAsUser=0" in p for p in problems)
    assert any("seccompProfile" in p for p in problems)


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_operator_and_test_pods_meet_the_restricted_pod_security_standard(
    name: str, tmp_path: Path
) -> None:
    specs = _pod_specs(render(COMBINATIONS[name], tmp_path))
    assert specs
    for pod_name, spec in specs:
        assert restricted_violations(spec) == [], pod_name


def test_default_deployment_runs_one_non_root_operator_watching_all_namespaces() -> None:
    objects = render()
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == 65532
    (container,) = pod["containers"]
    assert container["image"] == "ghcr.io/dressage/dressage-operator:0.1.0"
    assert container["command"] == ["dressage-operator"]
    assert container["args"] == ["--all-namespaces", "--metrics-port=8080", "--health-port=8081"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "metrics": 8080,
        "healthz": 8081,
    }
    probe = container["livenessProbe"]["httpGet"]
    assert (probe["path"], probe["port"]) == ("/healthz", "healthz")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DRESSAGE_OPERATOR_RUNTIME_IMAGE"] == "ghcr.io/dressage/dressage-runtime:0.1.0"
    assert (
        env["DRESSAGE_OPERATOR_SGLANG_IMAGE"]
        == "ghcr.io/dressage/dressage-sglang:0.1.0-sglang0.5.23"
    )
    assert env["DRESSAGE_OPERATOR_NETWORK_POLICIES"] == "false"


def test_an_admin_raises_a_job_limit_and_the_creation_bound_in_the_values(
    tmp_path: Path,
) -> None:
    values = {"limits": {"inferenceReplicas": 500}, "maxCreatesPerCycle": 20}
    (container,) = one(render(values, tmp_path), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ]
    env = {e["name"]: e.get("value") for e in container["env"]}
    config = OperatorConfig.from_env(env)
    assert config.limits["inferenceReplicas"] == 500
    assert config.limits["trainerNodes"] == OperatorConfig().limits["trainerNodes"]
    assert config.max_creates_per_cycle == 20
    # The chart's defaults are the operator's own.
    (default,) = one(render({}, tmp_path), "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in default["env"]}
    assert OperatorConfig.from_env(env) == OperatorConfig.from_env({})
    # Above the CRD's static maximum the values schema refuses it.
    result = helm_template({"limits": {"inferenceReplicas": 5000}}, tmp_path)
    assert result.returncode != 0
    assert "inferenceReplicas" in result.stderr


def test_network_policies_are_switched_on_by_one_value(tmp_path: Path) -> None:
    objects = render(COMBINATIONS["network-policies"], tmp_path)
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert OperatorConfig.from_env(env).network_policies is True
    assert OperatorConfig.from_env({}).network_policies is False


def _rules(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """(apiGroup, resource) -> verbs."""
    table: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                table.setdefault((group, resource), set()).update(rule["verbs"])
    return table


# The operator's rules, listed once in operator/dressage_operator/rbac.py:
# (apiGroup, resource) -> verbs.
CLUSTER_SCOPED = {("apiextensions.k8s.io", "customresourcedefinitions"), ("", "namespaces")}
EXPECTED_OPERATOR_RULES = _rules({"rules": rbac.CLUSTER_RULES})


def _operator_role(objects: list[dict[str, Any]], name: str = RELEASE) -> dict[str, Any]:
    return next(r for r in by_kind(objects, "ClusterRole") if r["metadata"]["name"] == name)


def test_cluster_rbac_is_least_privilege() -> None:
    objects = render()
    operator_role = _operator_role(objects)
    assert _rules(operator_role) == EXPECTED_OPERATOR_RULES
    for rule in operator_role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"]["name"] == RELEASE
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE}
    ]
    assert by_kind(objects, "Role") == []


def test_operator_rule_list_grants_what_the_operator_does() -> None:
    """The rules the chart is compared with cover the operator's own writes: its children
    (owner references with blockOwnerDeletion need `asyncrljobs/finalizers: update`), its
    status and kopf's discovery."""
    assert EXPECTED_OPERATOR_RULES[("dressage.io", "asyncrljobs/finalizers")] == {"update"}
    assert EXPECTED_OPERATOR_RULES[("dressage.io", "asyncrljobs/status")] >= {"patch"}
    assert EXPECTED_OPERATOR_RULES[("", "pods")] >= {"create", "delete", "watch"}
    assert EXPECTED_OPERATOR_RULES[("apps", "deployments")] >= {"create", "patch", "delete"}
    assert set(EXPECTED_OPERATOR_RULES) >= CLUSTER_SCOPED


def test_single_namespace_mode_has_no_cluster_wide_operator_permission(tmp_path: Path) -> None:
    objects = render(COMBINATIONS["single-namespace"], tmp_path)
    role = one(objects, "Role")
    assert role["metadata"]["namespace"] == "team-a"
    assert _rules(role) == {
        key: verbs for key, verbs in EXPECTED_OPERATOR_RULES.items() if key not in CLUSTER_SCOPED
    }
    binding = one(objects, "RoleBinding")
    assert binding["metadata"]["namespace"] == "team-a"
    assert binding["subjects"][0]["namespace"] == NAMESPACE
    assert by_kind(objects, "ClusterRoleBinding") == []
    # Only the aggregated user roles remain cluster-scoped, and they grant no operator rights.
    cluster_roles = {r["metadata"]["name"] for r in by_kind(objects, "ClusterRole")}
    assert cluster_roles == {f"{RELEASE}-asyncrljob-editor", f"{RELEASE}-asyncrljob-viewer"}
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--namespace=team-a" in args
    assert "--all-namespaces" not in args
    pod_monitor = one(objects, "PodMonitor")
    assert pod_monitor["spec"]["namespaceSelector"] == {"matchNames": ["team-a"]}


def test_editor_and_viewer_roles_aggregate_into_the_builtin_roles() -> None:
    roles = {r["metadata"]["name"]: r for r in by_kind(render(), "ClusterRole")}
    editor = roles[f"{RELEASE}-asyncrljob-editor"]
    viewer = roles[f"{RELEASE}-asyncrljob-viewer"]
    assert editor["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert editor["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert viewer["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    assert _rules(editor)[("dressage.io", "asyncrljobs")] >= {"create", "delete", "patch"}
    assert _rules(editor)[("dressage.io", "asyncrljobs/status")] == {"get"}
    for verbs in _rules(viewer).values():
        assert verbs == {"get", "list", "watch"}


def test_monitoring_objects_are_absent_by_default() -> None:
    kinds = {obj["kind"] for obj in render()}
    assert not kinds & PROMETHEUS_OPERATOR_KINDS
    assert "ConfigMap" not in kinds
    # The metrics Service and the helm test pod are on by default.
    assert {"Service", "Pod"} <= kinds


def test_monitoring_combination_renders_monitors_for_kube_prometheus_stack(
    tmp_path: Path,
) -> None:
    objects = render(COMBINATIONS["monitoring"], tmp_path)
    service = one(objects, "Service")
    service_monitor = one(objects, "ServiceMonitor")
    assert service_monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert service_monitor["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items()
    )
    (endpoint,) = service_monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"] == "metrics"
    assert endpoint["honorLabels"] is True

    pod_monitor = one(objects, "PodMonitor")
    assert pod_monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert pod_monitor["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/name": "dressage"}
    assert pod_monitor["spec"]["namespaceSelector"] == {"any": True}
    endpoints = pod_monitor["spec"]["podMetricsEndpoints"]
    assert [e["port"] for e in endpoints] == ["metrics", "http", "http"]
    for endpoint in endpoints:
        relabel = {
            r["targetLabel"]: r["sourceLabels"]
            for r in endpoint["relabelings"]
            if r["action"] == "replace"
        }
        assert relabel["dressage_job"] == ["__meta_kubernetes_pod_label_dressage_io_job"]
        assert relabel["component"] == ["__meta_kubernetes_pod_label_app_kubernetes_io_component"]

    rule = one(objects, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    for group in rule["spec"]["groups"]:
        for alert in group["rules"]:
            assert alert["labels"]["team"] == "rl"


def test_the_operator_service_selects_only_the_operator_pod() -> None:
    objects = render()
    service = one(objects, "Service")
    deployment = one(objects, "Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    test_pod = one(objects, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    # The operator's ReplicaSet would adopt a test pod matching its selector.
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= test_pod["metadata"]["labels"].items()
    assert not service["spec"]["selector"].items() <= test_pod["metadata"]["labels"].items()
    command = test_pod["spec"]["containers"][0]["command"]
    assert command[-1] == f"http://{RELEASE}-metrics.{NAMESPACE}.svc:8080/metrics"


def test_dashboard_configmap_has_the_sidecar_label_and_the_dashboard(tmp_path: Path) -> None:
    configmap = one(render({"grafanaDashboard": {"enabled": True}}, tmp_path), "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert configmap["data"]["dressage.json"] == (
        CHART / "dashboards" / "dressage.json"
    ).read_text().rstrip("\n")


def test_dashboard_sidecar_label_namespace_and_folder_are_configurable(tmp_path: Path) -> None:
    objects = render(COMBINATIONS["overrides"], tmp_path)
    configmap = one(objects, "ConfigMap")
    assert configmap["metadata"]["labels"]["grafana.example.com/dashboard"] == "dressage"
    assert "grafana_dashboard" not in configmap["metadata"]["labels"]
    monitoring = one(render(COMBINATIONS["monitoring"], tmp_path), "ConfigMap")
    assert monitoring["metadata"]["namespace"] == "monitoring"
    assert monitoring["metadata"]["annotations"] == {"grafana_folder": "Dressage"}


def test_overrides_reach_the_deployment(tmp_path: Path) -> None:
    objects = render(COMBINATIONS["overrides"], tmp_path)
    deployment = one(objects, "Deployment")
    assert deployment["metadata"]["name"] == "rl-operator"
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.com/dressage-operator:1.2.3"
    assert container["args"][-1] == "--verbose"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["nodeSelector"] == {"node-role": "system"}
    assert pod["tolerations"][0]["key"] == "system"
    assert pod["priorityClassName"] == "system-cluster-critical"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["DRESSAGE_OPERATOR_SGLANG_IMAGE"] == "registry.example.com/sglang:0.5"
    assert env["EXTRA"] == "1"
    role_rules = _rules(_operator_role(objects, "rl-operator"))
    assert role_rules[("", "secrets")] == {"get"}


def test_without_rbac_and_service_account_the_named_account_is_used(tmp_path: Path) -> None:
    objects = render(COMBINATIONS["bring-your-own-rbac"], tmp_path)
    kinds = {obj["kind"] for obj in objects}
    assert not kinds & {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "Service"}
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "dressage-sa"


BAD_VALUES: dict[str, tuple[dict[str, Any], str]] = {
    "unknown top-level key": ({"imagePullSecret": [{"name": "x"}]}, "imagePullSecret"),
    "pull policy": ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    "two replicas": ({"replicaCount": 2}, "/replicaCount"),
    "numeric sidecar value": (
        {"grafanaDashboard": {"sidecarLabelValue": 1}},
        "/grafanaDashboard/sidecarLabelValue",
    ),
    "port out of range": ({"metrics": {"port": 70000}}, "/metrics/port"),
    "interval without unit": (
        {"metrics": {"serviceMonitor": {"interval": "30"}}},
        "/metrics/serviceMonitor/interval",
    ),
    "bad namespace": ({"watchNamespace": "Team_A", "singleNamespace": True}, "/watchNamespace"),
    "negative threshold": (
        {"prometheusRule": {"alerts": {"droppedGroupsHigh": {"threshold": -1}}}},
        "/prometheusRule/alerts/droppedGroupsHigh/threshold",
    ),
    "alert duration": (
        {"prometheusRule": {"alerts": {"jobFailed": {"for": "soon"}}}},
        "/prometheusRule/alerts/jobFailed/for",
    ),
    "secret as a string": ({"imagePullSecrets": ["regcred"]}, "/imagePullSecrets/0"),
    "string flag": ({"singleNamespace": "yes"}, "/singleNamespace"),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_schema_refuses_bad_values_naming_the_field(case: str, tmp_path: Path) -> None:
    values, field = BAD_VALUES[case]
    result = helm_template(values, tmp_path)
    assert result.returncode != 0
    assert "don't meet the specifications of the schema" in result.stderr
    assert field in result.stderr, result.stderr


CROSS_FIELD: dict[str, tuple[dict[str, Any], str]] = {
    "same ports": ({"livenessPort": 8080}, "metrics.port and livenessPort must differ"),
    "watch namespace without single-namespace mode": (
        {"watchNamespace": "team-a"},
        "watchNamespace is set but singleNamespace is false",
    ),
    "service monitor without service": (
        {"metrics": {"service": {"enabled": False}, "serviceMonitor": {"enabled": True}}},
        "metrics.serviceMonitor.enabled needs metrics.service.enabled",
    ),
}


@pytest.mark.parametrize("case", sorted(CROSS_FIELD))
def test_cross_field_mistakes_fail_with_a_message(case: str, tmp_path: Path) -> None:
    values, message = CROSS_FIELD[case]
    result = helm_template(values, tmp_path)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def _operator_args(objects: list[dict[str, Any]]) -> list[str]:
    container = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["dressage-operator"]
    args: list[str] = container["args"]
    return args


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_operator_command_line_is_accepted_by_the_operator(name: str, tmp_path: Path) -> None:
    """The Deployment's arguments parse with the operator's own argument parser and mean
    what the chart's values say."""
    values = COMBINATIONS[name]
    args = operator_main.build_parser().parse_args(_operator_args(render(values, tmp_path)))
    assert args.metrics_port == values.get("metrics", {}).get("port", 8080)
    assert args.health_port == values.get("livenessPort", 8081)
    if values.get("singleNamespace"):
        assert (args.namespace, args.all_namespaces) == ([values["watchNamespace"]], False)
    else:
        assert (args.namespace, args.all_namespaces) == ([], True)


def test_operator_parser_refuses_the_flags_the_chart_must_not_use() -> None:
    """The check above can fail: a flag the operator lacks is an argparse error."""
    with pytest.raises(SystemExit):
        operator_main.build_parser().parse_args(["run", "--all-namespaces"])
    with pytest.raises(SystemExit):
        operator_main.build_parser().parse_args(["--liveness-port=8081"])


def _prometheus_label(key: str) -> str:
    """Prometheus' name for a Kubernetes pod label (characters outside [a-zA-Z0-9_] -> `_`)."""
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def _keeps(endpoint: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether the endpoint's `keep` relabelings keep a pod with these labels."""
    for r in endpoint["relabelings"]:
        if r["action"] != "keep":
            continue
        (source,) = r["sourceLabels"]
        value = next((v for k, v in labels.items() if _prometheus_label(k) == source), "")
        if not re.fullmatch(r["regex"], value):
            return False
    return True


def _scraped_ports(monitor: dict[str, Any], pod: dict[str, Any]) -> list[int]:
    """The container ports of one operator-built pod that the PodMonitor scrapes."""
    labels = pod["metadata"]["labels"]
    selector = monitor["spec"]["selector"]
    if not selector["matchLabels"].items() <= labels.items():
        return []
    if not all(e["key"] in labels for e in selector["matchExpressions"]):
        return []
    ports = {p["name"]: p["containerPort"] for c in pod["spec"]["containers"] for p in c["ports"]}
    return [
        ports[e["port"]]
        for e in monitor["spec"]["podMetricsEndpoints"]
        if e["port"] in ports and _keeps(e, labels)
    ]


def test_pod_monitor_scrapes_the_operators_trainer_and_proxy_pods(tmp_path: Path) -> None:
    """The PodMonitor, rendered by helm, against the pods the operator's pure builders make:
    it selects them, scrapes the trainer's /metrics port, the proxy's HTTP port (which serves
    /metrics) and the engines' HTTP port (SGLang's own /metrics, and the embedded engine's),
    each once, and copies the operator's job label."""
    monitor = one(render(COMBINATIONS["monitoring"], tmp_path), "PodMonitor")
    for endpoint in monitor["spec"]["podMetricsEndpoints"]:
        job = next(r for r in endpoint["relabelings"] if r.get("targetLabel") == "dressage_job")
        assert job["sourceLabels"] == [_prometheus_label(naming.LABEL_JOB)]
    job = load_job(ROOT / "examples" / "local-tiny.yaml")
    owner = children.Owner(name="tiny", namespace="ml", uid="uid-1")
    config = OperatorConfig()
    (trainer,) = children.build_trainer_pods(job, owner, config, gang=0)
    proxy = children.build_proxy_deployment(job, owner, config)["spec"]["template"]
    proxy = {"metadata": proxy["metadata"], "spec": proxy["spec"]}
    engine = children.build_engine_pod(job, owner, config, 0)
    assert _scraped_ports(monitor, trainer) == [naming.METRICS_PORT]
    assert _scraped_ports(monitor, proxy) == [naming.PROXY_PORT]
    assert _scraped_ports(monitor, engine) == [naming.ENGINE_PORT]
    embedded = load_job(ROOT / "examples" / "kind-cpu.yaml")
    assert embedded.spec.inference.engine == "embedded"
    engine = children.build_engine_pod(embedded, owner, config, 0)
    assert _scraped_ports(monitor, engine) == [naming.ENGINE_PORT]
    values = {"metrics": {"podMonitor": {"enabled": True, "enginePort": ""}}}
    no_engines = one(render(values, tmp_path), "PodMonitor")
    assert _scraped_ports(no_engines, engine) == []
