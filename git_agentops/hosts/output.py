"""What a host's own output says about a generation: its session id, and the tokens and dollars it used.

The supervisor reads the host log of a generation (stdout and stderr, as the agent wrote them) after its process
ended or was stopped, and takes from it what the host reports about itself:

* **claude** (``--output-format stream-json`` or ``json``): ``session_id`` on every event; the final ``result``
  event's ``total_cost_usd`` and ``usage``; when the agent was stopped before its result (at its handoff), the
  ``usage`` of each ``assistant`` message summed, without a cost;
* **codex** (``--json``): ``thread.started``'s ``thread_id``; ``turn.completed``'s ``usage`` summed (codex reports
  no dollars);
* **opencode** (``--format json``): ``sessionID`` on every event; each ``step_finish`` part's ``tokens`` and
  ``cost`` summed.

Anything that is not a JSON object line is ignored, and a host that printed no JSON at all is reported as such
(``parsed`` false), never an error: usage is evidence about cost, not a condition of the run. The caller
decides what to do with an unexpected format (a diagnostic event). Pure functions over text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

_SESSION: Final = re.compile(r"[A-Za-z0-9._:-]{1,256}")


@dataclass(frozen=True, slots=True)
class HostReport:
    """What a generation's output said about itself. ``parsed`` is False when it held no JSON event at all."""

    parsed: bool
    session: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    result: str | None = None  # the final message, where the host prints one

    @property
    def reported_usage(self) -> bool:
        """Whether the host said anything about what it used."""
        return bool(self.input_tokens or self.output_tokens or self.cost_usd is not None)


def _events(text: str) -> list[dict[str, Any]]:
    events = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _cost(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def _session(value: Any) -> str | None:
    return value if isinstance(value, str) and _SESSION.fullmatch(value) else None


def _claude(events: list[dict[str, Any]]) -> HostReport:
    session = next((s for e in events if (s := _session(e.get("session_id")))), None)
    result = next((e for e in reversed(events) if e.get("type") == "result"), None)
    if result is not None:
        usage = result.get("usage") if isinstance(result.get("usage"), dict) else {}
        tokens_in = (
            _int(usage.get("input_tokens"))
            + _int(usage.get("cache_creation_input_tokens"))
            + _int(usage.get("cache_read_input_tokens"))
        )
        text = result.get("result")
        return HostReport(
            True,
            _session(result.get("session_id")) or session,
            tokens_in,
            _int(usage.get("output_tokens")),
            _cost(result.get("total_cost_usd")),
            text if isinstance(text, str) else None,
        )
    tokens_in = tokens_out = 0
    for event in events:
        message = event.get("message") if event.get("type") == "assistant" else None
        usage = message.get("usage") if isinstance(message, dict) and isinstance(message.get("usage"), dict) else None
        if usage:
            tokens_in += _int(usage.get("input_tokens")) + _int(usage.get("cache_read_input_tokens"))
            tokens_out += _int(usage.get("output_tokens"))
    return HostReport(bool(events), session, tokens_in, tokens_out, None)


def _codex(events: list[dict[str, Any]]) -> HostReport:
    session = next(
        (s for e in events if e.get("type") == "thread.started" and (s := _session(e.get("thread_id")))), None
    )
    tokens_in = tokens_out = 0
    message = None
    for event in events:
        if event.get("type") in ("turn.completed", "turn.failed") and isinstance(event.get("usage"), dict):
            tokens_in += _int(event["usage"].get("input_tokens"))
            tokens_out += _int(event["usage"].get("output_tokens"))
        item = event.get("item")
        if event.get("type") == "item.completed" and isinstance(item, dict) and item.get("type") == "agent_message":
            message = item.get("text") if isinstance(item.get("text"), str) else message
    return HostReport(bool(events), session, tokens_in, tokens_out, None, message)


def _opencode(events: list[dict[str, Any]]) -> HostReport:
    session = next((s for e in events if (s := _session(e.get("sessionID")))), None)
    tokens_in = tokens_out = 0
    cost: float | None = None
    text = ""
    for event in events:
        raw = event.get("part")
        part: dict[str, Any] = raw if isinstance(raw, dict) else {}
        if event.get("type") == "step_finish":
            tokens = _dict(part.get("tokens"))
            cache = _dict(tokens.get("cache"))
            tokens_in += _int(tokens.get("input")) + _int(cache.get("read")) + _int(cache.get("write"))
            tokens_out += _int(tokens.get("output")) + _int(tokens.get("reasoning"))
            step_cost = _cost(part.get("cost"))
            if step_cost is not None:
                cost = (cost or 0.0) + step_cost
        elif event.get("type") == "text" and isinstance(part.get("text"), str):
            text += part["text"]
    return HostReport(bool(events), session, tokens_in, tokens_out, cost, text or None)


def parse(kind: str, text: str) -> HostReport | None:
    """What the output of one generation of a ``kind`` host says; None for kinds that report nothing."""
    if kind not in ("claude", "codex", "opencode"):
        return None
    events = _events(text)
    if kind == "claude":
        return _claude(events)
    if kind == "codex":
        return _codex(events)
    return _opencode(events)
