"""The supervisor's lease on its run: which machine serves it, until when.

One supervisor per run is enforced on one machine by an OS lock; across machines it is a lease recorded in the
run's state (``lease.json``): the machine's id, the supervisor's pid identity, a **term** that grows by one with
every change of holder (a fencing epoch), and an expiry the supervisor renews with its heartbeat. The lease
travels with the run's refs (``git agentops-sync``); a claim on another machine is a compare-and-swap of the
run's state ref on the remote, so two machines can never both win it. Expiry is wall-clock time: the machines'
clocks must agree to well within a lease's life.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

DEFAULT_TTL: Final = 60.0
"""Seconds a lease lasts unless renewed; the supervisor renews it every third of that."""


@dataclass(frozen=True, slots=True)
class Lease:
    """``lease.json`` of a run's state."""

    holder: str  # the machine id
    pid: int
    start_time: int
    term: int
    expires_at: float
    renewed_at: float

    def expired(self, now: float) -> bool:
        """Whether the lease has run out (a dead machine's lease does, once it stops renewing)."""
        return now >= self.expires_at

    def held_by_another(self, machine: str, now: float) -> bool:
        """Whether another machine holds it still: only that machine may serve the run."""
        return self.holder != machine and not self.expired(now)

    def describe(self, now: float) -> str:
        """``machine m1 (pid 41, term 3) until 12 s from now``."""
        left = self.expires_at - now
        when = f"for {left:.0f} s more" if left > 0 else f"expired {-left:.0f} s ago"
        return f"machine {self.holder} (pid {self.pid}, term {self.term}) {when}"

    def to_json(self) -> dict[str, Any]:
        """The ``lease.json`` document."""
        return {
            "holder": self.holder,
            "pid": self.pid,
            "startTime": self.start_time,
            "term": self.term,
            "expiresAt": self.expires_at,
            "renewedAt": self.renewed_at,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Lease:
        """Read ``lease.json`` back (validated against its schema)."""
        return cls(
            holder=doc["holder"],
            pid=int(doc["pid"]),
            start_time=int(doc["startTime"]),
            term=int(doc["term"]),
            expires_at=float(doc["expiresAt"]),
            renewed_at=float(doc["renewedAt"]),
        )


def claimed(current: Lease | None, machine: str, pid: int, start_time: int, now: float, ttl: float) -> Lease:
    """The lease ``machine`` holds after claiming (or renewing) it; the term moves on with a new holder."""
    term = (current.term if current is not None else 0) + (
        0 if current is not None and current.holder == machine else 1
    )
    return Lease(machine, pid, start_time, term, now + ttl, now)
