"""Find the Drums daemons of a Kubernetes cluster from the EndpointSlices of their headless
Service (deploy/kubernetes, docs/kubernetes.md), and place sessions client-side over them.

    from drums.k8s import EndpointSliceDiscovery
    async with EndpointSliceDiscovery(service="drums").cluster() as cluster:   # in a pod of SA drums-client
        s = await cluster.create(image="default")

Only reads: one ``GET .../endpointslices?labelSelector=kubernetes.io/service-name=<svc>``
per ``discovery_s`` (served from the API server's watch cache: ``resourceVersion=0``).
A create or claim goes to a daemon and never to the API server. Endpoints that are not
ready (a draining node fails its readiness probe) or terminating take no new work; the
sessions already on them go on (``AsyncClusterClient.set_endpoints``).

In a pod, the API server, its CA, the service-account token (re-read on every call:
tokens rotate) and the namespace come from the standard in-cluster locations; outside,
pass ``api_server``, ``token`` and ``namespace``. The daemons' bearer token is
``drums_token`` or ``DRUMS_TOKEN`` (the Secret ``drums-token`` mounted or in the env).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx

from .cluster import AsyncClusterClient, Endpoint

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class DiscoveryError(Exception):
    code = "discovery_failed"


class EndpointSliceDiscovery:
    def __init__(
        self,
        service: str = "drums",
        namespace: str | None = None,
        *,
        api_server: str | None = None,
        token: str | None = None,
        ca_file: str | None = None,
        drums_token: str | None = None,
        port_name: str = "http",
        scheme: str = "http",
        timeout_s: float = 10.0,
    ):
        self.service = service
        self.namespace = namespace or _read(SA_DIR / "namespace") or "default"
        if api_server is None:
            host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            if not host:
                raise DiscoveryError("not in a pod (no KUBERNETES_SERVICE_HOST): pass api_server=")
            api_server = f"https://{'[' + host + ']' if ':' in host else host}:{port}"
        self.api_server = api_server.rstrip("/")
        self._token = token
        ca = ca_file or (str(SA_DIR / "ca.crt") if (SA_DIR / "ca.crt").exists() else None)
        self._http = httpx.AsyncClient(verify=ca if ca else True, timeout=timeout_s)
        self.drums_token = drums_token or os.environ.get("DRUMS_TOKEN") or ""
        self.port_name = port_name
        self.scheme = scheme
        #: What the last list skipped, and why (malformed slices, FQDN addresses, no port).
        self.skipped: list[str] = []

    def _auth(self) -> dict[str, str]:
        token = self._token if self._token is not None else _read(SA_DIR / "token")
        return {"authorization": f"Bearer {token}"} if token else {}

    async def endpoints(self) -> list[Endpoint]:
        """The ready daemons now, one Endpoint each (deduplicated, sorted by URL)."""
        path = f"/apis/discovery.k8s.io/v1/namespaces/{self.namespace}/endpointslices"
        params = {"labelSelector": f"kubernetes.io/service-name={self.service}", "resourceVersion": "0"}
        try:
            r = await self._http.get(self.api_server + path, params=params, headers=self._auth())
        except httpx.TransportError as e:
            raise DiscoveryError(f"cannot reach the API server at {self.api_server}: {e}") from e
        if r.status_code != 200:
            raise DiscoveryError(f"listing EndpointSlices: HTTP {r.status_code}: {r.text[:200]}")
        try:
            body = r.json()
            items = body["items"]
            if not isinstance(items, list):
                raise TypeError("items is not a list")
        except (ValueError, KeyError, TypeError) as e:
            raise DiscoveryError(f"listing EndpointSlices: malformed answer ({e})") from e
        return self.parse(items)

    def parse(self, items: list[Any]) -> list[Endpoint]:
        out: dict[str, Endpoint] = {}
        self.skipped = []
        for sl in items:
            try:
                name = sl["metadata"]["name"]
                family = sl["addressType"]
                if family not in ("IPv4", "IPv6"):
                    self.skipped.append(f"{name}: addressType {family}")
                    continue
                ports = sl.get("ports") or []
                port = next((p.get("port") for p in ports if p.get("name") == self.port_name), None)
                if not isinstance(port, int):
                    self.skipped.append(f"{name}: no port named {self.port_name!r}")
                    continue
                for ep in sl.get("endpoints") or []:
                    cond = ep.get("conditions") or {}
                    # The API: a nil `ready` means ready; `terminating` endpoints take no new work.
                    if cond.get("ready") is False or cond.get("terminating") is True:
                        continue
                    addr = ep["addresses"][0]
                    host = f"[{addr}]" if family == "IPv6" else addr
                    url = f"{self.scheme}://{host}:{port}"
                    node = ep.get("nodeName") or (ep.get("targetRef") or {}).get("name") or addr
                    out.setdefault(url, Endpoint(url, self.drums_token, node))
            except (KeyError, IndexError, TypeError, AttributeError) as e:
                self.skipped.append(f"a malformed EndpointSlice: {e!r}")
        return sorted(out.values(), key=lambda e: e.url)

    def cluster(self, **kw: Any) -> AsyncClusterClient:
        """A cluster client whose host list follows the EndpointSlices (``discovery_s``, default 5 s)."""
        return AsyncClusterClient(discovery=self, **kw)

    async def aclose(self) -> None:
        await self._http.aclose()


def _read(p: Path) -> str | None:
    try:
        return p.read_text().strip()
    except OSError:
        return None
