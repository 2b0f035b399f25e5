"""What each generation of a worker used, as its host reported it, and the run's totals."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from ..canonical import JsonObject, JsonValue
from .jsonform import JsonRecord, on_disk


class Accounted(Protocol):
    """Anything holding generations' usage: a worker record (:class:`git_agentops.model.run.Worker`)."""

    @property
    def usage(self) -> tuple[Usage, ...]:
        """Its generations' usage, oldest first."""
        ...


@dataclass(frozen=True, slots=True)
class Usage(JsonRecord):
    """What one generation of a worker cost, as its host reported it (tokens, and dollars where it says)."""

    generation: int = on_disk("generation")
    input_tokens: int = on_disk("inputTokens", default=0)
    output_tokens: int = on_disk("outputTokens", default=0)
    cost_usd: float | None = on_disk("costUsd", default=None)
    partial: bool = on_disk("partial", absent=False)
    """The generation was stopped before its host printed all it used: the figures are a floor (written only when
    true, so older records read the same)."""
    session: str | None = on_disk("session", absent=None)
    """The host session it ran in (a host that reports a resumed session's running total is charged the rest)."""

    @property
    def tokens(self) -> int:
        """Input and output tokens together (what a token budget counts)."""
        return self.input_tokens + self.output_tokens


def with_usage(worker: Accounted, usage: Usage) -> tuple[Usage, ...]:
    """The worker's usage with this generation's entry set (a generation is accounted once; the newest wins)."""
    kept = tuple(u for u in worker.usage if u.generation != usage.generation)
    return (*kept, usage)[-64:]


@dataclass(frozen=True, slots=True)
class ReviewerUsage:
    """What one attempt of a reviewer used (its ``generation`` is the attempt): reviewers spend the run's budget
    like workers do."""

    reviewer: str
    usage: Usage

    def to_json(self) -> JsonObject:
        """The ``budget.reviewUsage[]`` entry of ``run.json``."""
        return {"reviewer": self.reviewer, **{k: v for k, v in self.usage.to_json().items() if k != "session"}}

    @classmethod
    def from_json(cls, doc: Mapping[str, JsonValue]) -> ReviewerUsage:
        """Read a ``budget.reviewUsage[]`` entry back."""
        return cls(str(doc["reviewer"]), Usage.from_json(doc))


@dataclass(frozen=True, slots=True)
class Reviews:
    """The reviewers' usage as one more account beside the workers' (see :func:`total_usage`)."""

    entries: tuple[ReviewerUsage, ...]

    @property
    def usage(self) -> tuple[Usage, ...]:
        """Every reviewer attempt's usage."""
        return tuple(entry.usage for entry in self.entries)


def session_spent(worker: Accounted, session: str, generation: int) -> tuple[int, int]:
    """(input, output) tokens recorded for the generations before ``generation`` that ran in host ``session``."""
    earlier = [u for u in worker.usage if u.session == session and u.generation < generation]
    return sum(u.input_tokens for u in earlier), sum(u.output_tokens for u in earlier)


def total_usage(workers: Iterable[Accounted]) -> tuple[int, float | None]:
    """(tokens, dollars) over every generation of every worker, stopped ones included; dollars is None when no host
    reported any. A partial generation counts what its host printed before it was stopped."""
    tokens = 0
    cost: float | None = None
    for worker in workers:
        for usage in worker.usage:
            tokens += usage.tokens
            if usage.cost_usd is not None:
                cost = (cost or 0.0) + usage.cost_usd
    return tokens, cost


def usage_partial(workers: Iterable[Accounted]) -> bool:
    """Whether some generation was stopped before its host printed all it used (the totals are then a floor)."""
    return any(usage.partial for worker in workers for usage in worker.usage)
