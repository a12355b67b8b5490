"""The operator's pod commands and environment, read by the real runtime entry points.

The pure builders in `dressage_operator.children` produce the trainer and proxy containers;
here their command lines are parsed by torchrun's own parser and by `dressage`'s
(`dressage.cli.build_parser`), and their environment is resolved by the same functions
`dressage train` and `dressage proxy` run, with the ConfigMap's manifest standing in for
`/etc/dressage/job.yaml`. Every `DRESSAGE_*` variable the operator sets must be one the
runtime reads, and every other one must reach torchrun through its command line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from dressage_operator import children, naming
from dressage_operator.config import OperatorConfig
from torch.distributed.run import get_args_parser

from dressage import cli
from dressage.api import AsyncRLJob, load_job
from dressage.api.job import CODE_ENV
from dressage.orchestrator import train_cli as trainer_cli
from dressage.proxy import cli as proxy_cli
from dressage.proxy.config import parse_engine_urls

EXAMPLES = sorted((Path(__file__).resolve().parents[4] / "examples").glob("*.yaml"))
CONFIG = OperatorConfig()
OWNER = children.Owner(name="job-a", namespace="ns", uid="uid-1")
KUBELET_VAR = re.compile(r"\$\((\w+)\)")
# torch.distributed reads these from the environment of each worker (torchrun overrides them
# per process); the operator sets them for one-process-per-pod launches.
TORCH_ENV = {"WORLD_SIZE"}


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def _expand(args: list[str], env: dict[str, str]) -> list[str]:
    """`$(VAR)` references expanded as the kubelet does (an undefined one stays as is)."""
    return [KUBELET_VAR.sub(lambda m: env.get(m[1], m[0]), a) for a in args]


def _local_config(job: AsyncRLJob, tmp_path: Path) -> Path:
    """The ConfigMap's job.yaml, written where the test can read it."""
    config_map = children.build_config_map(job, OWNER)
    path = tmp_path / naming.CONFIG_KEY
    path.write_text(config_map["data"][naming.CONFIG_KEY])
    return path


def _relocated(argv: list[str], env: dict[str, str], config: Path) -> list[str]:
    """The arguments and environment with the in-pod config path replaced by `config`."""
    for name, value in env.items():
        if value == naming.CONFIG_PATH:
            env[name] = str(config)
    return [str(config) if a == naming.CONFIG_PATH else a for a in argv]


def _trainer_container(job: AsyncRLJob, rank: int = 0) -> dict[str, Any]:
    pods = children.build_trainer_pods(job, OWNER, CONFIG, gang=0)
    container: dict[str, Any] = pods[rank]["spec"]["containers"][0]
    return container


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_trainer_command_parses_with_torchrun_and_dressage_train(
    example: Path, tmp_path: Path
) -> None:
    job = load_job(example)
    container = _trainer_container(job)
    env = _env(container)
    command = _expand(container["command"], env)
    assert not [a for a in command if KUBELET_VAR.search(a)], command
    assert command[0] == "torchrun"
    torchrun = get_args_parser().parse_args(command[1:])
    assert torchrun.module is True
    assert torchrun.nnodes == str(job.spec.trainer.nodes)
    assert torchrun.nproc_per_node == str(max(job.spec.trainer.gpus_per_node, 1))
    assert (torchrun.master_addr, torchrun.master_port) == (
        naming.trainer_host("job-a", "ns", 0),
        naming.RENDEZVOUS_PORT,
    )
    argv = [torchrun.training_script, *torchrun.training_script_args]
    assert argv[:2] == ["dressage", "train"]

    config = _local_config(job, tmp_path)
    argv = _relocated(argv[1:], env, config)
    args = cli.build_parser(argv).parse_args(argv)
    wiring = trainer_cli.resolve_wiring(args, env)
    assert wiring.config == str(config)
    assert wiring.engine_urls == children.engine_urls(job, OWNER)
    assert wiring.proxy_url == naming.proxy_url("job-a", "ns")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert wiring.metrics_port == ports["metrics"] == naming.METRICS_PORT
    # The trainer writes weights/<version>/ there; engines mount the same storage.
    assert wiring.workdir == Path(job.spec.storage.mount_path) / "job-a"
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert job.spec.storage.mount_path in mounts
    loaded = trainer_cli.load_wired_job(wiring)
    assert loaded.spec.rollout.max_retries == job.spec.rollout.max_retries
    assert loaded.metadata.name == "job-a"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_trainer_variable_is_read_by_the_runtime_or_torchrun(example: Path) -> None:
    container = _trainer_container(load_job(example))
    env = _env(container)
    referenced = {m for arg in container["command"] for m in KUBELET_VAR.findall(arg)}
    for name in env:
        if name.startswith("DRESSAGE_"):
            assert name in trainer_cli.ENV_VARS, f"dressage train does not read {name}"
        else:
            # Template env (e.g. NCCL_DEBUG) comes from the job; the rest is rendezvous.
            from_template = any(e.name == name for e in load_job(example).spec.trainer.template.env)
            # `spec.code`'s PYTHONPATH / PYTHONUSERBASE are read by the Python interpreter.
            for_python = name in CODE_ENV
            assert name in referenced | TORCH_ENV or from_template or for_python, (
                f"nothing reads {name}"
            )
    assert referenced <= set(env)


def test_trainer_environment_overrides_are_applied(tmp_path: Path) -> None:
    """The variables change what the trainer does (flags still win)."""
    job = load_job(EXAMPLES[0])
    config = _local_config(job, tmp_path)
    env = {
        trainer_cli.JOB_CONFIG_ENV: str(config),
        trainer_cli.ENGINE_URLS_ENV: "http://e0:1,http://e1:1",
        trainer_cli.PROXY_URL_ENV: "http://p:2",
        trainer_cli.METRICS_PORT_ENV: "9999",
        trainer_cli.WORKDIR_ENV: str(tmp_path / "run"),
        trainer_cli.MAX_RETRIES_ENV: "7",
    }
    args = cli.build_parser(["train"]).parse_args(["train"])
    wiring = trainer_cli.resolve_wiring(args, env)
    assert wiring.engine_urls == ["http://e0:1", "http://e1:1"]
    assert (wiring.proxy_url, wiring.metrics_port) == ("http://p:2", 9999)
    assert wiring.workdir == tmp_path / "run"
    assert trainer_cli.load_wired_job(wiring).spec.rollout.max_retries == 7
    argv = ["train", "--metrics-port", "1234", "--proxy-url", "http://q:3"]
    flagged = trainer_cli.resolve_wiring(cli.build_parser(argv).parse_args(argv), env)
    assert (flagged.metrics_port, flagged.proxy_url) == (1234, "http://q:3")
    with pytest.raises(ValueError, match="DRESSAGE_JOB_CONFIG"):
        trainer_cli.resolve_wiring(args, {})
    with pytest.raises(ValueError, match=trainer_cli.METRICS_PORT_ENV):
        trainer_cli.resolve_wiring(args, {**env, trainer_cli.METRICS_PORT_ENV: "x"})
    # Proxy replicas: a list or the headless Service's dns+ form; a bad one is named.
    for replicas in ("http://p0:2,http://p1:2", "dns+http://job-a-proxy-replicas.ns.svc:8000"):
        wired = trainer_cli.resolve_wiring(args, {**env, trainer_cli.PROXY_URL_ENV: replicas})
        assert wired.proxy_url == replicas
    for bad, why in (("http://p:2,p1:2", "'p1:2' is not an http"), ("dns+http://h", "HOST:PORT")):
        with pytest.raises(
            ValueError, match=f"--proxy-url \\(\\${trainer_cli.PROXY_URL_ENV}\\).*{why}"
        ):
            trainer_cli.resolve_wiring(args, {**env, trainer_cli.PROXY_URL_ENV: bad})


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_proxy_command_parses_with_dressage_proxy(example: Path, tmp_path: Path) -> None:
    job = load_job(example)
    deployment = children.build_proxy_deployment(job, OWNER, CONFIG)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = _env(container)
    command = container["command"]
    assert command[:4] == ["python", "-m", "dressage", "proxy"]
    for name in env:
        if name.startswith("DRESSAGE_"):
            assert name in proxy_cli.ENV_VARS, f"dressage proxy does not read {name}"

    config = _local_config(job, tmp_path)
    argv = _relocated(command[3:], env, config)
    args = cli.build_parser(argv).parse_args(argv)
    proxy = proxy_cli.build_config(args, env)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert (proxy.host, proxy.port) == ("0.0.0.0", ports["http"])
    # The engines come from the ConfigMap key mounted at --engine-urls-file.
    assert proxy.engine_urls == []
    assert str(proxy.engine_urls_file) == naming.ENGINES_PATH
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts[naming.CONFIG_DIR] == "config"
    listed = children.build_config_map(job, OWNER)["data"][naming.ENGINES_KEY]
    assert parse_engine_urls(listed) == children.engine_urls(job, OWNER)
    assert proxy.partial_rollout == job.spec.partial_rollout
    assert proxy.max_partial_rollout_preempts == job.spec.staleness.max_partial_rollout_preempts
    assert proxy.record_token_versions == job.spec.proxy.record_token_versions
    # Without --config the manifest comes from $DRESSAGE_JOB_CONFIG.
    bare = [a for a in argv if a not in ("--config", str(config))]
    from_env = proxy_cli.build_config(cli.build_parser(bare).parse_args(bare), env)
    assert from_env == proxy
