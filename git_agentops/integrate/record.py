"""The integration record's writes: each step of the transaction recorded in ``run.json`` before the next.

Shared by the pipeline (:mod:`.pipeline`) and the candidate's gate (:mod:`.gate`): :func:`advance` writes the next
state of the record as one journal commit and passes the step's crash-test fault point; :func:`fail` records a
failure and turns it into the refusal of the finalize request it answers.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event
from ..gitstore.repo import Store
from ..model.integration import Integration, IntegrationStatus
from ..model.run import Run
from ..runs import state as runstate
from ..runs.jobs import JobContext, Refused, Request

ZERO_DIGEST: Final = "0" * 64


def advance(ctx: JobContext, store: Store, code: str, summary: str, **fields: Any) -> Run:
    """Write the next state of the integration record (one journal commit), then pass the fault point."""

    def update(change: Change, view: runstate.RunView) -> Run:
        run = view.run()
        current = run.integration or Integration(IntegrationStatus.REQUESTED)
        run = replace(run, integration=current.advanced(**fields))
        runstate.put_run(change, run)
        return run

    data = {k: (str(v) if isinstance(v, IntegrationStatus) else v) for k, v in fields.items()}
    run = runstate.mutate(
        runstate.journal(store, ctx.run_id),
        update,
        Event(code, summary, {_camel(k): v for k, v in data.items() if k not in ("reviews", "verification")}),
    )
    if "status" in fields:
        ctx.fault(f"integration:{fields['status']}")
    return run


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def fail(ctx: JobContext, store: Store, code: str, message: str, detail: dict[str, Any]) -> Refused:
    """Record the failure and refuse the finalize request it answers."""
    run = runstate.read(store, ctx.run_id).run()
    info = (run.integration.request if run.integration else None) or {}
    advance(
        ctx, store, "INTEGRATION_FAILED", f"integration failed: {code}", status=IntegrationStatus.FAILED, failure=code
    )
    request = Request(
        {
            "requestId": info.get("requestId", "finalize"),
            "workerId": run.coordinator_id,
            "generation": info.get("generation", 1),
            "action": "finalize",
        },
        info.get("requestDigest", ZERO_DIGEST),
        info.get("rawDigest", ZERO_DIGEST),
    )
    return Refused(AgentOpsError(code, message), request, detail, None)
