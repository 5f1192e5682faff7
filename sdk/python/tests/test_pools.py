"""client.pools against a real daemon: put, claim (hit, miss, empty), release, delete."""

import time

import pytest

from drums import AsyncClient, errors


def _wait_ready(client, name, n, timeout=120.0):
    end = time.monotonic() + timeout
    while True:
        p = client.pools.get(name)
        if p["ready"] >= n:
            return p
        assert time.monotonic() < end, f"pool {name} did not fill: {p}"
        time.sleep(0.2)


def test_pool_put_claim_release_delete(client):
    name = "py" + str(int(time.monotonic() * 1000) % 100000)
    p = client.pools.put(name, size=1, image="minimal", labels={"who": "sdk"})
    assert p["size"] == 1 and p["source"] == "api"
    try:
        _wait_ready(client, name, 1)
        with client.pools.claim(name, labels={"run": "1"}) as s:
            assert s.pool_hit is True and s.state == "ready" and s.generation == 1
            assert s.info["labels"] == {"who": "sdk", "run": "1", "drums.pool": name}
            assert s.exec(["id", "-u"])["stdout"].strip() == "1000"
            r = s.release("destroy")
            assert r["returned"] is False and r["mode"] == "destroy"
        with pytest.raises(errors.PoolNotFound):
            client.pools.claim("no-such-pool")
        client.pools.put(name, size=0, image="minimal", labels={"who": "sdk"})
        with pytest.raises(errors.PoolEmpty):
            client.pools.claim(name, on_empty="fail")
        with pytest.raises(errors.ImageNotFound):
            client.pools.put(name, size=1, image="no-such-image")
        assert [q["name"] for q in client.pools.list()] == [name]
    finally:
        client.pools.delete(name)
    assert client.pools.list() == []


def test_async_pool_claim_miss(daemon):
    import asyncio

    async def go():
        async with AsyncClient(daemon.url, daemon.token) as c:
            await c.pools.put("pyasync", size=0, image="minimal")
            try:
                s = await c.pools.claim("pyasync")
                assert s.pool_hit is False and s.state == "ready"
                assert (await s.release())["returned"] is False
            finally:
                await c.pools.delete("pyasync")

    asyncio.run(go())
