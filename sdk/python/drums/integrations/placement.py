"""Client-side placement: power of two choices over the hosts' own reports.

Each host is a :class:`HostLoad`: the sessions its last ``GET /v1/host`` said it
can still take (``capacity``), minus what this client has in flight there and
what it placed there since that report. :meth:`Placer.choose` samples two
usable hosts at random and takes the one with more room (Mitzenmacher's "power
of two choices": the most loaded host stays within ``log log n`` of the mean,
where one random choice drifts to ``log n / log log n``), without reading every
host's load on every decision. The same code runs in the cluster client
(``drums.cluster``) and in the 1,000-host simulation (``sdk/python/bench/placement_sim.py``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Sequence


@dataclass(eq=False)
class HostLoad:
    key: str
    #: Sessions the host said it can still take (capacity.sessions of its report).
    capacity: int = 0
    #: Placements this client has sent there and not seen answered.
    inflight: int = 0
    #: Placements answered since the report was taken (the report does not count them yet).
    placed: int = 0
    #: False while the host is unreachable, restarted-and-unconfirmed, draining or malformed.
    usable: bool = False
    #: Why it is not usable (for error messages and the cluster's problem list).
    problem: str | None = field(default="no report yet")

    @property
    def free(self) -> int:
        return self.capacity - self.inflight - self.placed


class Placer:
    """Picks a host for ``need`` sessions. ``samples`` random probes are tried before
    falling back to a full scan (only when almost every host is full or unusable)."""

    def __init__(self, rng: random.Random | None = None, *, choices: int = 2, samples: int = 8):
        self.rng = rng or random.Random()
        self.choices = choices
        self.samples = samples
        #: How many decisions needed the full scan (a sign the cluster is nearly full).
        self.scans = 0

    def choose(
        self, hosts: Sequence[HostLoad], need: int = 1, exclude: frozenset[str] | set[str] = frozenset()
    ) -> HostLoad | None:
        n = len(hosts)
        if n == 0:
            return None
        ok = lambda h: h.usable and h.free >= need and h.key not in exclude  # noqa: E731
        picks: list[HostLoad] = []
        for _ in range(self.samples):
            h = hosts[self.rng.randrange(n)]
            if ok(h) and h not in picks:
                picks.append(h)
                if len(picks) == self.choices:
                    break
        if len(picks) < self.choices:
            self.scans += 1
            eligible = [h for h in hosts if ok(h)]
            if not eligible:
                return None
            picks = self.rng.sample(eligible, min(self.choices, len(eligible)))
        return max(picks, key=lambda h: h.free)
