"""What each generation of a worker used, as its host reported it, and the run's totals."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol


class Accounted(Protocol):
    """Anything holding generations' usage: a worker record (:class:`git_agentops.model.run.Worker`)."""

    @property
    def usage(self) -> tuple[Usage, ...]:
        """Its generations' usage, oldest first."""
        ...


@dataclass(frozen=True, slots=True)
class Usage:
    """What one generation of a worker cost, as its host reported it (tokens, and dollars where it says)."""

    generation: int
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    partial: bool = False
    """The generation was stopped before its host printed all it used: the figures are a floor."""
    session: str | None = None
    """The host session it ran in (a host that reports a resumed session's running total is charged the rest)."""

    @property
    def tokens(self) -> int:
        """Input and output tokens together (what a token budget counts)."""
        return self.input_tokens + self.output_tokens

    def to_json(self) -> dict[str, Any]:
        """The ``usage[]`` entry of a worker record (``partial`` only when true, so older records read the same)."""
        doc: dict[str, Any] = {
            "generation": self.generation,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "costUsd": self.cost_usd,
        }
        if self.partial:
            doc["partial"] = True
        if self.session is not None:
            doc["session"] = self.session
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Usage:
        """Read a ``usage[]`` entry back."""
        return cls(
            int(doc["generation"]),
            int(doc["inputTokens"]),
            int(doc["outputTokens"]),
            doc.get("costUsd"),
            bool(doc.get("partial", False)),
            doc.get("session"),
        )


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

    def to_json(self) -> dict[str, Any]:
        """The ``budget.reviewUsage[]`` entry of ``run.json``."""
        return {"reviewer": self.reviewer, **{k: v for k, v in self.usage.to_json().items() if k != "session"}}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ReviewerUsage:
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
