"""What a generation used, as its host printed it: read from its log, recorded on the worker.

Usage is evidence about cost, not a condition of the run: output without any JSON event where JSON was asked is a
diagnostic event (``HOST_OUTPUT_UNPARSED``) and costs nothing known. A generation stopped before its host printed
all it used (:attr:`~git_agentops.model.hosts.base.HostReport.partial`) is recorded with what it did print and
marked ``partial``: ``run status``, the report and the receipt say the totals are a floor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import eventkinds as kinds
from ..hosts.output import parse
from ..model.hosts import kind_of
from ..model.run import Worker
from ..model.usage import Usage, session_spent, with_usage


def account(
    kind: str, worker: Worker, output: str, note: Callable[[str, kinds.EventCode, str], None]
) -> dict[str, Any]:
    """The session id and usage a ``kind`` host printed in ``output`` (the worker's current generation), as worker
    changes; ``note(worker_id, code, summary)`` records a diagnostic."""
    report = parse(kind, output)
    if report is None:
        return {}
    if not report.parsed:
        if output.strip():
            note(
                worker.worker_id,
                kinds.HOST_OUTPUT_UNPARSED,
                f"{worker.worker_id}: host {worker.host} ({kind}) printed no JSON events; usage unknown",
            )
        return {}
    changes: dict[str, Any] = {}
    if report.session and report.session != worker.session:
        changes["session"] = report.session
    if report.reported_usage:
        tokens_in, tokens_out = report.input_tokens, report.output_tokens
        if report.session and kind_of(kind).cumulative:  # charge this generation only what it added
            before_in, before_out = session_spent(worker, report.session, worker.generation)
            tokens_in, tokens_out = max(0, tokens_in - before_in), max(0, tokens_out - before_out)
        usage = Usage(worker.generation, tokens_in, tokens_out, report.cost_usd, report.partial, report.session)
        changes["usage"] = with_usage(worker, usage)
    return changes
