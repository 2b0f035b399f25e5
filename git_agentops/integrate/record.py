"""The integration record's writes: each step of the transaction recorded in ``run.json`` before the next.

Shared by the pipeline (:mod:`.pipeline`) and the candidate's gate (:mod:`.gate`): :func:`advance` writes the next
state of the record as one journal commit and passes the step's crash-test fault point; :func:`fail` records a
failure and turns it into the refusal of the finalize request it answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from .. import eventkinds as kinds
from ..errors import AgentOpsError
from ..gitstore.journal import Change, Event
from ..gitstore.repo import Store
from ..model.delivery import UNRECORDED_DIGEST, UNRECORDED_FINALIZE, PendingFinalize
from ..model.integration import INTEGRATION, Integration, IntegrationStatus
from ..model.run import Run
from ..runs import state as runstate
from ..runs.jobs import JobContext, Refused, Request

ZERO_DIGEST: Final = UNRECORDED_DIGEST


def advance(ctx: JobContext, store: Store, code: kinds.EventCode, summary: str, **fields: Any) -> Run:
    """Write the next state of the integration record (one journal commit), then pass the fault point."""

    def update(change: Change, view: runstate.RunView) -> Run:
        run = view.run()
        current = run.integration or Integration(IntegrationStatus.REQUESTED)
        run = replace(run, integration=current.advanced(**fields))
        runstate.put_run(change, run)
        return run

    data = dict(INTEGRATION.encode(k, v) for k, v in fields.items() if k not in ("reviews", "verification"))
    run = runstate.mutate(runstate.journal(store, ctx.run_id), update, Event(code, summary, data))
    if "status" in fields:
        ctx.fault(f"integration:{fields['status']}")
    return run


def fail(ctx: JobContext, store: Store, code: str, message: str, detail: Mapping[str, object]) -> Refused:
    """Record the failure and refuse the finalize request it answers."""
    run = runstate.read(store, ctx.run_id).run()
    pending = answered(run.integration)
    advance(
        ctx,
        store,
        kinds.INTEGRATION_FAILED,
        f"integration failed: {code}",
        status=IntegrationStatus.FAILED,
        failure=code,
    )
    request = Request(
        {
            "requestId": pending.request_id,
            "workerId": run.coordinator_id,
            "generation": pending.generation,
            "action": "finalize",
        },
        pending.request_digest,
        pending.raw_digest,
    )
    return Refused(AgentOpsError(code, message), request, detail, None)


def answered(integration: Integration | None) -> PendingFinalize:
    """The finalize request ``integration`` answers (:data:`UNRECORDED_FINALIZE` for a record without one)."""
    return (integration.request if integration is not None else None) or UNRECORDED_FINALIZE
