"""Kubernetes: the manifests in deploy/kubernetes validate offline against the API schema of a
pinned Kubernetes version (kubernetes-validate's bundled schemas, strict: unknown fields fail),
and drums.k8s discovers daemons from EndpointSlices. No API server can be built and run here
within a sane CI cost (docs/kubernetes.md says why), so discovery is tested against recorded
EndpointSliceList answers (tests/data/k8s, themselves checked against the same schema) served by
a loopback server, in front of two real Drums daemons on 127.0.0.2 and 127.0.0.3."""

from __future__ import annotations

import asyncio
import copy
import http.server
import json
import socket
import threading
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from drums import Client
from drums.k8s import DiscoveryError, EndpointSliceDiscovery

from conftest import Daemon

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = ROOT / "deploy" / "kubernetes"
DATA = Path(__file__).with_name("data") / "k8s"
#: The Kubernetes version the manifests are pinned to (docs/kubernetes.md).
K8S_VERSION = "1.33.0"


def _docs() -> list[tuple[str, dict]]:
    kust = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    out = []
    for f in kust["resources"]:
        for d in yaml.safe_load_all((MANIFESTS / f).read_text()):
            if d:
                out.append((f, d))
    return out


@pytest.mark.fast
def test_manifests_validate_against_the_pinned_api_schema():
    kust = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    on_disk = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kust["resources"]) == on_disk, "every manifest is in the kustomization"
    kinds = {}
    for f, d in _docs():
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)  # raises on any schema error
        kinds.setdefault(d["kind"], []).append(d)
        if d["kind"] != "Namespace":
            assert d["metadata"]["namespace"] == kust["namespace"], f
    # The validator is strict: a misspelt field fails.
    ds = copy.deepcopy(kinds["DaemonSet"][0])
    ds["spec"]["template"]["spec"]["hostNetwrok"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSION, strict=True)

    pod = kinds["DaemonSet"][0]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["securityContext"]["privileged"] is True and pod["hostNetwork"] is True
    assert (
        "host-probe.ts" in " ".join(c["readinessProbe"]["exec"]["command"])
        and c["readinessProbe"]["exec"]["command"][-1] == "ready"
    )
    assert c["lifecycle"]["preStop"]["exec"]["command"][2:4] == ["drain", "--wait"]
    assert int(c["lifecycle"]["preStop"]["exec"]["command"][4]) < pod["terminationGracePeriodSeconds"]
    env = {e["name"]: e for e in c["env"]}
    assert env["DRUMS_HOST_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert {v["hostPath"]["path"] for v in pod["volumes"]} >= {"/var/lib/drums", "/run/drums"}
    svc = kinds["Service"][0]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["selector"].items() <= pod_labels(kinds).items()
    # RBAC: clients may only read EndpointSlices; the daemon has no token at all.
    (role,) = kinds["Role"]
    assert role["rules"] == [
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]}
    ]
    assert pod["automountServiceAccountToken"] is False
    assert "ClusterRole" not in kinds and "ClusterRoleBinding" not in kinds


def pod_labels(kinds) -> dict:
    return kinds["DaemonSet"][0]["spec"]["template"]["metadata"]["labels"]


@pytest.mark.fast
def test_recorded_answers_match_the_api_schema():
    for f in DATA.glob("endpointslices-*.json"):
        body = json.loads(f.read_text())
        kubernetes_validate.validate(body, K8S_VERSION, strict=True)
        for item in body["items"]:
            kubernetes_validate.validate(
                {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", **item}, K8S_VERSION, strict=True
            )


class _FakeApi(http.server.BaseHTTPRequestHandler):
    """Serves the recorded answer now in `server.answer` to GETs with the right token; records every request."""

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802
        srv = self.server
        srv.requests.append(("GET", self.path))  # type: ignore[attr-defined]
        if self.headers.get("authorization") != "Bearer sa-token":
            return self._reply(401, b'{"kind":"Status","status":"Failure","reason":"Unauthorized","code":401}')
        if (
            not self.path.startswith("/apis/discovery.k8s.io/v1/namespaces/drums/endpointslices?")
            or "kubernetes.io%2Fservice-name%3Ddrums" not in self.path
        ):
            return self._reply(404, b'{"kind":"Status","code":404}')
        self._reply(*srv.answer)  # type: ignore[attr-defined]

    def _write(self):
        self.server.requests.append((self.command, self.path))  # type: ignore[attr-defined]
        self._reply(405, b"{}")

    do_POST = do_PUT = do_PATCH = do_DELETE = _write

    def log_message(self, *a):
        pass


def _recorded(name: str, port: int) -> tuple[int, bytes]:
    body = json.loads((DATA / name).read_text())
    for item in body["items"]:
        for p in item["ports"]:
            p["port"] = port
    return 200, json.dumps(body).encode()


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def test_discovery_from_endpointslices_places_client_side():
    port = _free_port()
    token = "drums-shared-token"
    daemons = []
    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeApi)
    api.requests, api.answer = [], _recorded("endpointslices-ready.json", port)  # type: ignore[attr-defined]
    threading.Thread(target=api.serve_forever, daemon=True).start()
    try:
        for addr in ("127.0.0.2", "127.0.0.3"):
            daemons.append(
                # A session cap below what memory allows makes both hosts report the same capacity, so the
                # placement below is deterministic (a memory-derived capacity differs between two reports
                # taken moments apart on a busy host: fresh-ci once saw 3/1).
                Daemon(
                    {"DRUMS_LISTEN": addr, "DRUMS_PORT": str(port), "DRUMS_TOKEN": token, "DRUMS_MAX_SESSIONS": "8"},
                    ["--allow-remote"],
                )
            )
        disc = EndpointSliceDiscovery(
            "drums",
            "drums",
            api_server=f"http://127.0.0.1:{api.server_address[1]}",
            token="sa-token",
            drums_token=token,
        )
        eps = await disc.endpoints()
        # Ready endpoints only (node-c is not ready); the FQDN slice is skipped and said so.
        assert [(e.url, e.name) for e in eps] == [
            (f"http://127.0.0.2:{port}", "node-a"),
            (f"http://127.0.0.3:{port}", "node-b"),
        ]
        assert disc.skipped == ["drums-fqdn-9zt4m: addressType FQDN"]

        import random

        async with disc.cluster(rng=random.Random(3), discovery_s=0.0, wait_s=10) as cluster:
            before = len(api.requests)  # type: ignore[attr-defined]
            made = [await cluster.create(image="minimal", screen="320x240") for _ in range(4)]
            try:
                assert cluster.spread() == {"node-a": 2, "node-b": 2}
                # node-b starts draining: its readiness probe fails and it leaves the ready endpoints.
                api.answer = _recorded("endpointslices-node-b-draining.json", port)  # type: ignore[attr-defined]
                await cluster.refresh()
                extra = await cluster.create(image="minimal", screen="320x240")
                made.append(extra)
                assert extra.host.name == "node-a"
                # Its sessions go on: act on one still works.
                on_b = next(s for s in made if s.host.name == "node-b")
                await on_b.act({"type": "move", "x": 5, "y": 5})
                # A broken API answer keeps the last good host list, reported as a problem.
                api.answer = (200, b'{"kind": "EndpointSliceList", "items": {}}')  # type: ignore[attr-defined]
                await cluster.refresh()
                assert "malformed" in cluster.problems["discovery"]
                made.append(await cluster.create(image="minimal", screen="320x240"))
                assert made[-1].host.name == "node-a"
            finally:
                await asyncio.gather(*(s.destroy() for s in made))
            # Every API-server request was a GET of the EndpointSlices: no claim or create wrote to it.
            assert api.requests[before:] and all(m == "GET" and "/endpointslices?" in p for m, p in api.requests)  # type: ignore[attr-defined]
        for d in daemons:
            with Client(d.url, token) as c:
                assert c.sessions.list() == []
        with pytest.raises(DiscoveryError):
            await EndpointSliceDiscovery(
                "drums", "drums", api_server=f"http://127.0.0.1:{api.server_address[1]}", token="wrong"
            ).endpoints()
    finally:
        api.shutdown()
        api.server_close()
        for d in daemons:
            d.stop()
