"""The placement code (drums.placement) and its simulation (sdk/python/bench/placement_sim.py), small enough
to run in seconds; the 1,000-host run is `python sdk/python/bench/placement_sim.py` (docs/scale.md)."""

from __future__ import annotations

import random

import pytest

from drums.cluster import validate_report
from drums.placement import HostLoad, Placer
from placement_sim import SimConfig, simulate  # sdk/python/bench (pytest pythonpath)

pytestmark = pytest.mark.fast  # pure: npm run check runs it


def test_choose_takes_the_freer_of_two_and_counts_in_flight():
    hosts = [HostLoad(str(i), capacity=10, usable=True, problem=None) for i in range(2)]
    hosts[0].inflight = 4
    p = Placer(random.Random(0))
    assert all(p.choose(hosts) is hosts[1] for _ in range(20))
    hosts[1].placed = 7  # answered since the report: counted until the next one
    assert p.choose(hosts) is hosts[0]
    assert p.choose(hosts, need=7) is None
    hosts[0].usable = False
    assert p.choose(hosts) is hosts[1] and p.choose(hosts, exclude={"1"}) is None


def test_full_scan_only_when_sampling_finds_too_few():
    hosts = [HostLoad(str(i), capacity=0, usable=True, problem=None) for i in range(1000)]
    hosts[517].capacity = 3
    p = Placer(random.Random(1))
    assert p.choose(hosts) is hosts[517] and p.scans == 1


def test_simulation_p2c_balances_better_than_random_and_counts_failures():
    cfg = SimConfig(
        hosts=100,
        capacity=64,
        sessions=5000,
        clients=4,
        duration_s=240,
        fill_s=30,
        life_s=120,
        failures=3,
        down_s=20,
        seed=5,
    )
    p2c, rnd = simulate(cfg, "p2c"), simulate(cfg, "random")
    assert p2c["placements"] == rnd["placements"] > 5000
    assert p2c["balance"]["maxOverMeanMedian"] < rnd["balance"]["maxOverMeanMedian"]
    assert p2c["hostFailures"] == 3 and p2c["sessionsLost"] > 0
    assert p2c["detectS"]["max"] <= cfg.refresh_s + 1e-9  # every client stops offering a dead host by its next report
    assert p2c["failedPlacements"] == 0


def test_simulation_over_capacity_fails_placements():
    cfg = SimConfig(
        hosts=20, capacity=10, sessions=400, clients=2, duration_s=60, fill_s=10, life_s=1e9, failures=0, seed=2
    )
    r = simulate(cfg, "p2c")
    assert r["heldAtEnd"] == 200 and r["failedPlacements"] == 200 and r["balance"]["fullHostsMedian"] == 1.0


@pytest.mark.parametrize(
    "bad, why",
    [
        ([], "not a JSON object"),
        (
            {
                "hostId": "",
                "instanceId": "i",
                "draining": False,
                "capacity": {"sessions": 1},
                "sessions": {"held": 0, "max": 1},
            },
            "hostId",
        ),
        (
            {
                "hostId": "h",
                "instanceId": "i",
                "draining": "no",
                "capacity": {"sessions": 1},
                "sessions": {"held": 0, "max": 1},
            },
            "draining",
        ),
        (
            {
                "hostId": "h",
                "instanceId": "i",
                "draining": False,
                "capacity": {"sessions": -1},
                "sessions": {"held": 0, "max": 1},
            },
            "capacity.sessions",
        ),
        (
            {
                "hostId": "h",
                "instanceId": "i",
                "draining": False,
                "capacity": {"sessions": True},
                "sessions": {"held": 0, "max": 1},
            },
            "capacity.sessions",
        ),
        ({"hostId": "h", "instanceId": "i", "draining": False, "capacity": {"sessions": 1}}, "sessions.held"),
    ],
)
def test_malformed_reports_are_named(bad, why):
    with pytest.raises(ValueError, match=why.replace(".", r"\.")):
        validate_report(bad)
