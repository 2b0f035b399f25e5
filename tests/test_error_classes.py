"""The classes of the error codes callers branch on (``git_agentops.errors.CodedError``), caught by type."""

from __future__ import annotations

import pickle

import pytest

from git_agentops.errors import (
    BY_CODE,
    CODES,
    AgentOpsError,
    CodedError,
    LockHeld,
    StateTampered,
    raised_as,
)
from git_agentops.gitstore.events import JournalTampered


@pytest.mark.parametrize("code", sorted(BY_CODE))
def test_an_error_made_with_a_branched_on_code_is_its_class(code: str) -> None:
    """Every raise site of the code -- and every rebuild of an error from a code it was handed -- makes the class,
    so a caller catching the class misses none of them."""
    error = AgentOpsError(code, "what happened")
    assert type(error) is BY_CODE[code] and isinstance(error, AgentOpsError)
    assert (error.code, error.message, str(error)) == (code, "what happened", f"error[{code}]: what happened")
    assert error.exit_status == CODES[code].exit_status


def test_a_coded_class_raised_by_type_is_the_error_the_code_made() -> None:
    made = AgentOpsError("LOCK_HELD", "held", details={"pid": 1})
    raised = LockHeld("held", details={"pid": 1})
    assert (
        made.to_json()
        == raised.to_json()
        == {
            "code": "LOCK_HELD",
            "message": "held",
            "exitStatus": 3,
            "details": {"pid": 1},
        }
    )


def test_codes_without_a_class_stay_plain_agentops_errors() -> None:
    assert type(AgentOpsError("REF_CONFLICT", "lost")) is AgentOpsError


def test_a_coded_class_refuses_another_code() -> None:
    with pytest.raises(TypeError):
        LockHeld("REF_CONFLICT", "lost")


def test_a_branched_on_code_cannot_be_raised_as_an_unrelated_class() -> None:
    """An ``AgentOpsError`` subclass that passes a code with a class of its own must inherit that class: else a
    caller catching the class would miss it."""

    class Elsewhere(AgentOpsError):
        pass

    with pytest.raises(TypeError, match="LOCK_HELD is raised as LockHeld"):
        Elsewhere("LOCK_HELD", "held")


def test_a_journal_tip_not_written_by_the_toolkit_is_caught_as_state_tampered() -> None:
    error = JournalTampered("refs/agentops/runs/r1/state", "1" * 40)
    assert isinstance(error, StateTampered) and error.code == "RUN_STATE_TAMPERED"
    assert raised_as(error) == "JournalTampered"


def test_a_failure_names_the_class_it_was_always_raised_as() -> None:
    """A job's failure fingerprint digests the class name: a coded error made from a code still says
    ``AgentOpsError``, so no fingerprint on disk changes."""
    assert raised_as(AgentOpsError("RUN_NOT_ACTIVE", "no")) == "AgentOpsError"
    assert raised_as(ValueError("x")) == "ValueError"


def test_a_coded_error_survives_pickling_whole() -> None:
    back = pickle.loads(pickle.dumps(AgentOpsError("SYNC_REMOTE_MOVED", "moved", details={"remote": "origin"})))
    assert type(back).__name__ == "RemoteMoved" and back.code == "SYNC_REMOTE_MOVED"
    assert back.details == {"remote": "origin"}


def test_every_coded_class_fixes_a_registered_code_of_its_own() -> None:
    assert all(code == cls.CODE and code in CODES for code, cls in BY_CODE.items())
    assert all(issubclass(cls, CodedError) for cls in BY_CODE.values())
    assert len(set(BY_CODE.values())) == len(BY_CODE)
