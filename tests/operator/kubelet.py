"""A small test kubelet: runs the pods the operator creates in the Kubernetes API emulation as
local processes, so a job runs end to end as it would on a cluster.

What it does, as a kubelet and cluster DNS would:

- watches (polls) the namespace's Pods and Deployments; a Deployment's pod template runs as
  one pod `<deployment>-0` (the emulation has no ReplicaSet controller) whose readiness is
  written to the Deployment's `status.readyReplicas`;
- runs a pod's init containers in order, then its containers; resolves `env` (`value`,
  `valueFrom.fieldRef`, `secretKeyRef`, `configMapKeyRef`, `envFrom`) from the API and expands
  `$(VAR)` in the command as Kubernetes does;
- mounts volumes by rewriting paths: a `persistentVolumeClaim` is a directory shared by every
  pod naming the claim, a `configMap` a directory of its keys, an `emptyDir` a fresh directory
  per pod; every mount path in the command, the environment and the ConfigMap's files becomes
  that directory; a ConfigMap changed while a pod runs reaches its files within
  `config_map_sync_s` (each key's file replaced whole, as a kubelet does for a volume mounted
  without `subPath`);
- networking: every pod gets loopback ports for its `containerPort`s (stable per pod name, so a
  replaced pod answers where its predecessor did). A pod's DNS name
  (`<hostname>.<subdomain>.<ns>.svc`) and a Service's (`<service>.<ns>.svc`, matched to pods by
  its selector, ports by `targetPort`) with a port become `127.0.0.1:<port>`; a bare DNS name
  becomes `127.0.0.1`; `--port N`, `--master-port=N` and environment values equal to one of the
  container's own ports become its loopback port, and `--host 0.0.0.0` loopback;
- probes: every container's `startupProbe` until it passes, then `livenessProbe` and
  `readinessProbe`, each with its declared `timeoutSeconds` (`httpGet`, `tcpSocket`), every
  `probe_interval_s` instead of `periodSeconds`, so a test sees many probes in seconds; every
  result is recorded (`ProbeResult`) and readiness sets the pod's `Ready` condition;
- pod status: `Pending`, then `Running` once the containers started, `Succeeded` or `Failed`
  when they exit (restart policy `Never`; a container of an `Always` pod that exits is
  restarted in place with `restartCount` counted); a pod deleted while its containers run
  is stopped gracefully: each container's `preStop` `exec` hook runs (with the environment
  and names it started with, within `terminationGracePeriodSeconds`, recorded in `hooks`),
  then SIGTERM, then SIGKILL (`kubelet_hooks`);
- faults a test injects: `evict` (the processes killed, no hook, the pod failed) and
  `freeze`/`thaw` (the processes stopped and continued, as on a stalled node);
- images: `python` and `torchrun` run in this interpreter; a container whose command is
  `python -m sglang.launch_server` runs the embedded engine instead (`sglang_as_embedded`
  maps the flags it needs and refuses every other one), playing the SGLang release of the
  pod's job (`spec.inference.sglangVersion`, or the tested release that stands in for it), so
  the operator's engines answer as that release's would; in the container mode
  (`runner=Containers(...)`, `kubelet_processes`) a container runs in its image with podman.

Not emulated: resource limits, security contexts (but in the container mode; also checked
against the schemas and the Pod Security Standard elsewhere), more than one node or Deployment
replica; the node's scheduling, image pulls, crash loops and OOM kills: `kubelet_failures`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from dressage_operator.naming import LABEL_JOB
from dressage_testkit.kube import EmulatedCluster
from dressage_testkit.processes import PROJECT_ROOT, free_port

from dressage.api.job import InferenceSpec

from .kubelet_command import local_ports
from .kubelet_failures import Node
from .kubelet_hooks import SIGTERM_WAIT_S, HookResult, grace_period_s, pre_stop_argv, run_hook
from .kubelet_probes import ProbeResult, run_probe
from .kubelet_processes import LocalProcesses, Process, Runner, exec_command, signal_container
from .kubelet_wiring import (
    desired_pods,
    dns_table,
    expand,
    replace_file,
    resolve_env,
    rewrite,
)

Obj = dict[str, Any]


@dataclass
class _Container:
    name: str
    process: Process | None = None
    log: Path | None = None
    restarts: int = 0
    started: bool = False
    """The startup probe passed (or there is none)."""
    ready: bool = False
    pre_stop: tuple[list[str], dict[str, str]] | None = None
    """The `preStop` hook's command line and environment, resolved at the container's start."""


@dataclass
class _Pod:
    name: str
    uid: str
    manifest: Obj
    root: Path
    deployment: str | None = None
    containers: dict[str, _Container] = field(default_factory=dict)
    phase: str = "Pending"
    ready: bool | None = None
    stopping: bool = False
    thread: threading.Thread | None = None
    probers: list[threading.Thread] = field(default_factory=list)
    mounts: dict[str, Path] = field(default_factory=dict)
    """Volume name -> its host directory."""
    projected: dict[str, dict[str, str]] = field(default_factory=dict)
    """ConfigMap volume name -> the ConfigMap data its files hold."""
    rewritten: dict[str, dict[str, str]] = field(default_factory=dict)
    """ConfigMap volume name -> its files' text as written (the data with names rewritten)."""


class Kubelet:
    """Runs the pods of one namespace of an `EmulatedCluster` as local processes."""

    def __init__(
        self,
        cluster: EmulatedCluster,
        root: Path,
        *,
        node_env: dict[str, str] | None = None,
        probe_interval_s: float = 0.25,
        runner: Runner | None = None,
    ) -> None:
        self.cluster = cluster
        self.root = Path(root)
        self.runner = runner or LocalProcesses()
        """How containers run: here (the default), or in their images (`Containers`)."""
        self.node_env = dict(node_env or {})
        """Extra environment of every container (what the node provides, e.g. no network)."""
        self.probe_interval_s = probe_interval_s
        self.node = Node(self)  # its resources, pulls and failures (`kubelet_failures`)
        self.config_map_sync_s = 1.0
        """How often a ConfigMap's changes reach the running pods that mount it (a kubelet
        takes up to its sync period plus its cache's TTL, about a minute)."""
        self.probes: list[ProbeResult] = []
        self.hooks: list[HookResult] = []  # every `preStop` hook run, in the order they ended
        self.terminated: list[str] = []
        """The pods whose graceful termination (hooks, SIGTERM, SIGKILL) is over, in order."""
        self.ports: dict[tuple[str, int], int] = {}
        self.pods: dict[str, _Pod] = {}
        self.finished: list[_Pod] = []
        self._lock = threading.RLock()
        self._files_lock = threading.Lock()
        """Held while ConfigMap files are written (at a container's start, on a change)."""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kubelet", daemon=True)

    # --- lifecycle

    def start(self) -> Kubelet:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        with self._lock:
            pods = [*self.pods.values(), *self.finished]
            for pod in pods:
                pod.stopping = True
        for pod in pods:
            self._kill(pod, signal.SIGTERM)
        for pod in pods:
            for thread in [pod.thread, *pod.probers]:
                if thread is not None:
                    thread.join(timeout=15)
        for pod in pods:
            self._kill(pod, signal.SIGKILL)
        for pod in pods:
            for state in list(pod.containers.values()):
                if state.process is not None:
                    # Reaped here, not by a pod thread that may have timed out: a Popen left
                    # unwaited warns ("still running") when it is collected in a later test.
                    state.process.wait(timeout=30)
        self.runner.close()

    def evict(self, name: str, reason: str = "Evicted") -> None:
        """Kill the pod's processes at once and fail it, as a node lost or an eviction does."""
        with self._lock:
            pod = self.pods[name]
            pod.stopping = True
        self._kill(pod, signal.SIGKILL)
        self._set_status(pod, "Failed", ready=False, reason=reason, message=f"test: {reason}")

    def freeze(self, name: str) -> None:
        """Stop (SIGSTOP) the pod's processes where they are, as a node that stalls does (or
        the cgroup freezer); `thaw` lets them go on. Its probes keep running and fail meanwhile,
        so freeze only a pod without probes, or discount them."""
        with self._lock:
            pod = self.pods[name]
        self._kill(pod, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        """Let the processes of a frozen pod (`freeze`) go on (SIGCONT)."""
        with self._lock:
            pod = self.pods[name]
        self._kill(pod, signal.SIGCONT)

    def port(self, pod: str, container_port: int) -> int:
        """The loopback port of `pod`'s `container_port` (allocated on first use)."""
        with self._lock:
            key = (pod, container_port)
            if key not in self.ports:
                self.ports[key] = free_port()
            return self.ports[key]

    def log_text(self, pod: str, container: str) -> str:
        path = self.root / "logs" / f"{pod}.{container}.log"
        return path.read_text(errors="replace") if path.is_file() else ""

    def running(self, name: str) -> bool:
        with self._lock:
            pod = self.pods.get(name)
            return pod is not None and pod.phase == "Running"

    def ready(self, name: str) -> bool:
        with self._lock:
            pod = self.pods.get(name)
            return (
                pod is not None
                and pod.phase == "Running"
                and all(c.ready for c in pod.containers.values())
            )

    # --- the sync loop

    def _loop(self) -> None:
        next_refresh = 0.0
        while not self._stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                self._sync()
                if time.monotonic() >= next_refresh:
                    next_refresh = time.monotonic() + self.config_map_sync_s
                    self._refresh_config_maps()
            self._stop.wait(0.1)

    def _desired(self) -> dict[str, tuple[str, Obj, str | None]]:
        return desired_pods(self.cluster, self.pods)

    def _sync(self) -> None:
        desired = self._desired()
        with self._lock:
            for name, pod in list(self.pods.items()):
                want = desired.get(name)
                if want is None or want[0] != pod.uid:
                    pod.stopping = True
                    del self.pods[name]
                    self.finished.append(pod)
                    threading.Thread(target=self._terminate, args=(pod,), daemon=True).start()
            for name, (uid, manifest, deployment) in desired.items():
                if name in self.pods or any(p.name == name and p.uid == uid for p in self.finished):
                    continue
                if any(p.name == name and _alive(p) for p in self.finished):
                    continue  # the predecessor's processes are still stopping
                pod = _Pod(
                    name=name,
                    uid=uid,
                    manifest=manifest,
                    root=self.root / "pods" / f"{name}-{uid[:8]}",
                    deployment=deployment,
                )
                self.pods[name] = pod
                pod.thread = threading.Thread(
                    target=self._run_pod, args=(pod,), name=f"pod-{name}", daemon=True
                )
                pod.thread.start()

    # --- one pod

    def _run_pod(self, pod: _Pod) -> None:
        spec = pod.manifest["spec"]
        try:
            mounts = pod.mounts = self._volumes(pod)
            for container in spec.get("initContainers") or []:
                if not self.node.admitted(pod, container):
                    return
                code = self._run_to_end(pod, container, mounts)
                if code != 0:
                    self._set_status(pod, "Failed", ready=False, reason="InitContainerFailed")
                    return
                if pod.stopping:
                    return
            for container in spec["containers"]:
                if not self.node.admitted(pod, container):
                    return
                pod.containers[container["name"]] = _Container(container["name"])
                self._start(pod, container, mounts)
            self._set_status(pod, "Running", ready=False)
            pod.probers = [
                threading.Thread(target=self._probe_loop, args=(pod, c), daemon=True)
                for c in spec["containers"]
            ]
            for prober in pod.probers:
                prober.start()
            self._watch(pod, spec, mounts)
        except Exception as exc:  # a bug here must show as a failed pod, not a hang
            self._set_status(pod, "Failed", ready=False, reason="KubeletError", message=str(exc))
            raise

    def _watch(self, pod: _Pod, spec: Obj, mounts: dict[str, Path]) -> None:
        policy = spec.get("restartPolicy", "Always")
        by_name = {c["name"]: c for c in spec["containers"]}
        while not pod.stopping:
            codes = {}
            for name, state in pod.containers.items():
                assert state.process is not None
                code = state.process.poll()
                if code is None:
                    continue
                if policy == "Always" or (policy == "OnFailure" and code != 0):
                    if not self.node.restart_due(pod, state, code):
                        continue
                    state.restarts += 1
                    state.started = state.ready = False
                    self._start(pod, by_name[name], mounts)
                    self._set_status(pod, "Running", ready=False)
                    continue
                codes[name] = code
            if len(codes) == len(pod.containers):
                failed = any(code != 0 for code in codes.values())
                self._set_status(pod, "Failed" if failed else "Succeeded", ready=False)
                return
            time.sleep(0.1)

    def _terminate(self, pod: _Pod) -> None:
        """A graceful delete (`kubelet_hooks`): each running container's `preStop` hook, within
        the pod's grace period, then SIGTERM, then SIGKILL after at most `SIGTERM_WAIT_S`."""
        deadline = time.monotonic() + grace_period_s(pod.manifest)
        for state in list(pod.containers.values()):
            process = state.process
            if state.pre_stop is None or process is None or process.poll() is not None:
                continue  # a container that is no longer running runs no hook
            argv, env = exec_command(process, *state.pre_stop)
            result = run_hook(
                argv,
                env,
                cwd=pod.root,
                log=self.root / "logs" / f"{pod.name}.{state.name}.preStop.log",
                timeout_s=deadline - time.monotonic(),
                pod=pod.name,
                container=state.name,
            )
            with self._lock:
                self.hooks.append(result)
        self._kill(pod, signal.SIGTERM)
        end = time.monotonic() + SIGTERM_WAIT_S
        while _alive(pod) and time.monotonic() < end:
            time.sleep(0.05)
        self._kill(pod, signal.SIGKILL)
        with self._lock:
            self.terminated.append(pod.name)

    def _kill(self, pod: _Pod, sig: signal.Signals) -> None:
        """Signal the containers' processes as a container's cgroup is (`signal_container`)."""
        for state in pod.containers.values():
            if state.process is not None:
                signal_container(state.process, sig)

    # --- volumes and rewriting

    def _volumes(self, pod: _Pod) -> dict[str, Path]:
        out: dict[str, Path] = {}
        for volume in pod.manifest["spec"].get("volumes") or []:
            name = volume["name"]
            if "persistentVolumeClaim" in volume:
                path = self.root / "claims" / volume["persistentVolumeClaim"]["claimName"]
            elif "configMap" in volume or "emptyDir" in volume:
                path = pod.root / "volumes" / name
            else:
                raise AssertionError(f"{pod.name}: volume {name} of an unemulated kind")
            path.mkdir(parents=True, exist_ok=True)
            out[name] = path
        for volume in pod.manifest["spec"].get("volumes") or []:
            if "configMap" in volume:
                cm_name = volume["configMap"]["name"]
                cm = self.cluster.get(self.cluster.path("v1", "configmaps", cm_name))
                assert cm is not None, f"{pod.name}: ConfigMap {cm_name} does not exist"
                data = dict(cm.get("data") or {})
                for key, text in data.items():
                    (out[volume["name"]] / key).write_text(text)
                pod.projected[volume["name"]] = data
        return out

    def _refresh_config_maps(self) -> None:
        """Bring the files of every running pod's ConfigMap volumes to the ConfigMap now in the
        API, as a kubelet does: each changed key's file is replaced whole (renamed over, so a
        reader sees the old text or the new, never part of it), a removed key's file goes, and
        the pod's containers go on running. Names in them are rewritten as at start."""
        with self._lock:
            pods = [p for p in self.pods.values() if p.phase == "Running" and not p.stopping]
        if not pods:
            return
        # A name that resolves only once its pod exists (an engine added with the ConfigMap
        # that lists it) is rewritten on a later pass, as cluster DNS answers once it can.
        dns = self._dns()
        for pod in pods:
            for volume in pod.manifest["spec"].get("volumes") or []:
                if "configMap" not in volume or volume["name"] not in pod.projected:
                    continue
                cm = self.cluster.get(
                    self.cluster.path("v1", "configmaps", volume["configMap"]["name"])
                )
                if cm is not None:
                    self._project(pod, volume["name"], dict(cm.get("data") or {}), dns)

    def _project(
        self, pod: _Pod, volume: str, data: dict[str, str], dns: dict[str, dict[int, int]]
    ) -> None:
        """Write each key of `data` whose text, names rewritten with `dns`, differs from its
        file's; remove the keys `data` no longer has."""
        directory = pod.mounts[volume]
        mounting = [
            c
            for c in pod.manifest["spec"]["containers"]
            if any(m["name"] == volume for m in c.get("volumeMounts") or [])
        ]
        paths = self.runner.mount_map(mounting[0], pod.mounts) if mounting else []
        written = pod.rewritten.setdefault(volume, {})
        with self._files_lock:
            # Removed keys go first: a reader that sees a key's new text sees the whole update.
            for key in pod.projected[volume].keys() - data.keys():
                (directory / key).unlink(missing_ok=True)
                written.pop(key, None)
            for key, text in data.items():
                out = rewrite(text, paths, dns)
                if written.get(key) != out:
                    replace_file(directory / key, out)
                    written[key] = out
            pod.projected[volume] = data

    def _dns(self) -> dict[str, dict[int, int]]:
        """DNS name -> {port -> loopback port}, from the pods and Services now in the API."""
        return dns_table(self.cluster, self._desired(), self.port)

    def _job_release(self, pod: _Pod) -> str:
        """The SGLang release of the job that owns `pod` (its `dressage.io/job` label)."""
        job = pod.manifest["metadata"].get("labels", {}).get(LABEL_JOB)
        body = self.cluster.get(self.cluster.job_path(job)) if job else None
        assert body is not None, f"{pod.name}: no job {job!r} for an engine pod"
        release = (body.get("spec", {}).get("inference") or {}).get("sglangVersion")
        return str(release or InferenceSpec.model_fields["sglang_version"].default)

    def _argv(
        self, pod: _Pod, container: Obj, mounts: dict[str, Path], *, argv_paths: bool = True
    ) -> tuple[list[str], Obj]:
        """`container`'s command line and environment here; `argv_paths` False keeps mount
        paths in the command line (a hook's program names URL paths like a mount's)."""
        env = resolve_env(self.cluster, pod.manifest, pod.name, pod.uid, container)
        own = {p["containerPort"] for p in container.get("ports") or []}
        for name, value in env.items():
            if value.isdigit() and int(value) in own:
                env[name] = str(self.port(pod.name, int(value)))
        argv = [expand(a, env) for a in [*container.get("command", []), *container.get("args", [])]]
        paths = self.runner.mount_map(container, mounts)
        dns = self._dns()
        argv = [rewrite(a, paths if argv_paths else [], dns) for a in argv]
        env = {k: rewrite(v, paths, dns) for k, v in env.items()}
        out = local_ports(argv, own, lambda port: self.port(pod.name, port))
        return self.runner.program(container, out, lambda: self._job_release(pod)), env

    def _rewrite_config_files(self, pod: _Pod, container: Obj, mounts: dict[str, Path]) -> None:
        """ConfigMap files name in-pod paths and Service names too: rewrite them in place."""
        paths = self.runner.mount_map(container, mounts)
        dns = self._dns()
        with self._files_lock:
            for volume in pod.manifest["spec"].get("volumes") or []:
                if "configMap" in volume:
                    written = pod.rewritten.setdefault(volume["name"], {})
                    for key in pod.projected.get(volume["name"], {}):
                        path = mounts[volume["name"]] / key
                        written[key] = rewrite(path.read_text(), paths, dns)
                        replace_file(path, written[key])

    def _full_env(self, pod: _Pod, env: dict[str, str]) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(PROJECT_ROOT), str(PROJECT_ROOT / "operator")) if p
            ),
            "PYTHONUNBUFFERED": "1",
            "HOME": str(pod.root / "home"),
            **self.node_env,
            **env,
        }

    def _popen(self, pod: _Pod, container: Obj, mounts: dict[str, Path]) -> Process:
        argv, env = self._argv(pod, container, mounts)
        self._rewrite_config_files(pod, container, mounts)
        full = self._full_env(pod, env)
        (pod.root / "home").mkdir(parents=True, exist_ok=True)
        log = self.root / "logs" / f"{pod.name}.{container['name']}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            out.write(f"$ {' '.join(argv)}\n".encode())
            out.flush()
            own = {**self.node_env, **env}
            return self.runner.start(pod, container, argv, own, full, out.fileno())

    def _run_to_end(self, pod: _Pod, container: Obj, mounts: dict[str, Path]) -> int:
        state = _Container(container["name"])
        pod.containers[state.name] = state
        state.process = self._popen(pod, container, mounts)
        try:
            return state.process.wait(timeout=120)
        finally:
            del pod.containers[state.name]

    def _start(self, pod: _Pod, container: Obj, mounts: dict[str, Path]) -> None:
        state = pod.containers[container["name"]]
        state.process = self._popen(pod, container, mounts)
        hook = pre_stop_argv(container)
        if hook is not None:
            argv, env = self._argv(pod, hook, mounts, argv_paths=False)
            state.pre_stop = (argv, self._full_env(pod, env))
        state.started = "startupProbe" not in container
        state.ready = "readinessProbe" not in container and state.started

    # --- probes

    def _probe_loop(self, pod: _Pod, container: Obj) -> None:
        state = pod.containers[container["name"]]
        while not pod.stopping and pod.phase == "Running":
            process = state.process
            if process is None or process.poll() is not None:
                time.sleep(self.probe_interval_s)
                continue
            kinds = ["startupProbe"] if not state.started else ["livenessProbe", "readinessProbe"]
            for kind in kinds:
                probe = container.get(kind)
                if probe is None:
                    continue
                result = self._probe(pod, container, kind, probe)
                if pod.stopping:
                    return
                with self._lock:
                    self.probes.append(result)
                if kind == "startupProbe" and result.ok:
                    state.started = True
                    state.ready = "readinessProbe" not in container
                if kind == "readinessProbe" and result.ok != state.ready:
                    state.ready = result.ok
                    self._set_status(pod, "Running", ready=self._all_ready(pod))
            if state.started and state.ready:
                self._set_status(pod, "Running", ready=self._all_ready(pod), only_if_changed=True)
            time.sleep(self.probe_interval_s)

    def _all_ready(self, pod: _Pod) -> bool:
        return all(c.ready for c in pod.containers.values())

    def _probe(self, pod: _Pod, container: Obj, kind: str, probe: Obj) -> ProbeResult:
        return run_probe(
            pod.name, pod.uid, container, kind, probe, lambda port: self.port(pod.name, port)
        )

    # --- status

    def _set_status(
        self,
        pod: _Pod,
        phase: str,
        *,
        ready: bool,
        reason: str | None = None,
        message: str | None = None,
        only_if_changed: bool = False,
    ) -> None:
        if self._stop.is_set():
            return
        with self._lock:
            changed = (pod.phase, pod.ready) != (phase, ready)
            if only_if_changed and not changed:
                return
            if pod.phase in ("Succeeded", "Failed") and phase == "Running":
                return
            pod.phase = phase
            pod.ready = ready
        c = self.cluster
        if pod.deployment is not None:
            replicas = 1 if phase == "Running" and ready else 0
            with contextlib.suppress(httpx.HTTPError):
                c.patch(
                    c.path("apps/v1", "deployments", pod.deployment),
                    {"status": {"replicas": 1, "readyReplicas": replicas}},
                )
            return
        status = self.node.pod_status(pod, phase, ready, reason, message)
        current = c.get(c.path("v1", "pods", pod.name))
        if current is None or current["metadata"]["uid"] != pod.uid:
            return
        with contextlib.suppress(httpx.HTTPError):
            c.patch(c.path("v1", "pods", pod.name), {"status": status})


def _alive(pod: _Pod) -> bool:
    return any(s.process is not None and s.process.poll() is None for s in pod.containers.values())
