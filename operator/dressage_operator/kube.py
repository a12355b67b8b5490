"""A small async Kubernetes REST client for the children (get, create, merge-patch, delete).

kopf watches; this client writes. It authenticates with the same credentials kopf logs in
with (`kopf.ConnectionInfo`), so a kubeconfig, a service account or a test emulator all work.
"""

from __future__ import annotations

import base64
import ssl
import tempfile
from typing import Any

import httpx
import kopf

Obj = dict[str, Any]

PLURALS = {
    "Pod": "pods",
    "Service": "services",
    "ConfigMap": "configmaps",
    "Deployment": "deployments",
    "NetworkPolicy": "networkpolicies",
    "AsyncRLJob": "asyncrljobs",
}


class KubeError(Exception):
    """An API error other than the expected 404/409, with what the API server said.

    `message` is the `Status` body's message (or the raw text when the answer is not a
    `Status`), `reason` its machine-readable reason (`Invalid`, `Forbidden`, ...) and `causes`
    the `(field, message)` pairs of `details.causes`.
    """

    def __init__(
        self,
        status: int,
        message: str,
        reason: str = "",
        causes: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.reason = reason
        self.causes = causes

    @classmethod
    def from_response(cls, response: httpx.Response) -> KubeError:
        """Read a Kubernetes `Status` answer; anything else keeps its first 300 characters."""
        error = Conflict if response.status_code == 409 else KubeError
        try:
            body = response.json()
        except ValueError:
            body = None
        if not isinstance(body, dict) or body.get("kind") != "Status":
            return error(response.status_code, response.text[:300])
        details = body.get("details") or {}
        causes = tuple(
            (str(c.get("field") or ""), str(c.get("message") or ""))
            for c in details.get("causes") or ()
            if isinstance(c, dict)
        )
        return error(
            response.status_code,
            str(body.get("message") or response.reason_phrase),
            str(body.get("reason") or ""),
            causes,
        )


class Conflict(KubeError):
    """409: the object already exists (creation raced, or the old one is still terminating)."""


def resource_path(api_version: str, plural: str, namespace: str | None, name: str = "") -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    ns = f"/namespaces/{namespace}" if namespace else ""
    return f"{base}{ns}/{plural}" + (f"/{name}" if name else "")


def object_path(obj: Obj, with_name: bool = True) -> str:
    meta = obj["metadata"]
    return resource_path(
        obj["apiVersion"],
        PLURALS[obj["kind"]],
        meta.get("namespace"),
        meta["name"] if with_name else "",
    )


def _as_bytes(data: str | bytes) -> bytes:
    return data.encode() if isinstance(data, str) else data


def _pem(data: str | bytes) -> bytes:
    """kubeconfig `*-data` fields are base64 of PEM; kopf passes them as given."""
    raw = _as_bytes(data)
    if raw.lstrip().startswith(b"-----BEGIN"):
        return raw
    return base64.b64decode(raw)


def client_from_connection(info: kopf.ConnectionInfo, timeout: float = 30.0) -> httpx.AsyncClient:
    """An httpx client authenticated like kopf's own connection."""
    headers = {"Accept": "application/json"}
    if info.token:
        headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
    auth = (info.username, info.password) if info.username and info.password else None
    verify: ssl.SSLContext | bool = True
    if info.insecure:
        verify = False
    elif info.ca_path or info.ca_data:
        context = ssl.create_default_context()
        if info.ca_path:
            context.load_verify_locations(cafile=str(info.ca_path))
        if info.ca_data:
            context.load_verify_locations(cadata=_pem(info.ca_data).decode())
        verify = context
    if isinstance(verify, ssl.SSLContext) and (info.certificate_path or info.certificate_data):
        cert_path = str(info.certificate_path or _tempfile(_pem(info.certificate_data or b"")))
        key_path = str(info.private_key_path or _tempfile(_pem(info.private_key_data or b"")))
        verify.load_cert_chain(cert_path, key_path)
    return httpx.AsyncClient(
        base_url=info.server.rstrip("/"),
        headers=headers,
        auth=auth,
        verify=verify,
        timeout=timeout,
    )


def _tempfile(data: bytes) -> str:
    with tempfile.NamedTemporaryFile(prefix="dressage-op-", suffix=".pem", delete=False) as f:
        f.write(data)
        return f.name


class Kube:
    """Typed-enough verbs over one authenticated client."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    @staticmethod
    def _check(response: httpx.Response) -> None:
        if response.status_code >= 400:
            raise KubeError.from_response(response)

    async def server_version(self) -> str | None:
        """The API server's `gitVersion` (`v1.31.2`), None when `/version` does not say."""
        try:
            response = await self.client.get("/version")
            version = response.json().get("gitVersion") if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        return str(version) if version else None

    async def get(self, path: str) -> Obj | None:
        response = await self.client.get(path)
        if response.status_code == 404:
            return None
        self._check(response)
        body: Obj = response.json()
        return body

    async def create(self, obj: Obj) -> Obj:
        response = await self.client.post(object_path(obj, with_name=False), json=obj)
        self._check(response)
        body: Obj = response.json()
        return body

    async def patch(self, path: str, patch: Obj) -> Obj | None:
        response = await self.client.patch(
            path, json=patch, headers={"Content-Type": "application/merge-patch+json"}
        )
        if response.status_code == 404:
            return None
        self._check(response)
        body: Obj = response.json()
        return body

    async def delete(self, path: str) -> bool:
        """Delete in the background (children of children go too); False when absent."""
        response = await self.client.request(
            "DELETE",
            path,
            json={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
        )
        if response.status_code == 404:
            return False
        self._check(response)
        return True
