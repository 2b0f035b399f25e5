"""One error root, one registry of stable codes, one map from code to exit status.

Every refusal the toolkit makes is an :class:`AgentOpsError` carrying a stable code string from :data:`CODES`.
Subclasses live next to the code that raises them (``RefConflict`` in ``gitstore.refs``, ``PathError`` in
``gitstore.private``...) but they all register their codes here, so the CLI boundary, the README table and the
tests read one list. A code names a *kind* of refusal; the message says what happened and what to do.

A code some caller branches on has a class of its own (:class:`CodedError`: ``LockHeld``, ``StateTampered``...),
caught by type rather than by comparing ``exc.code`` with a string. ``AgentOpsError("LOCK_HELD", ...)`` makes a
``LockHeld``, the way ``OSError(errno.ENOENT, ...)`` makes a ``FileNotFoundError``: every place that raises the code
-- or rebuilds the error from a code it was handed -- raises the class, and none can be missed.

Exit statuses (DESIGN §8): 0 ok; 1 a negative but valid answer; 2 usage error; 3 a refused operation;
4 internal error; 130 interrupted.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs hooks ~9 ms on every commit
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Final, Self

EXIT_OK: Final = 0
EXIT_NEGATIVE: Final = 1
EXIT_USAGE: Final = 2
EXIT_REFUSED: Final = 3
EXIT_INTERNAL: Final = 4
EXIT_INTERRUPTED: Final = 130


class CodeInfo:
    """A registered code's exit status and summary (a plain class: hooks import this module on every commit)."""

    __slots__ = ("exit_status", "summary")

    def __init__(self, exit_status: int, summary: str) -> None:
        self.exit_status = exit_status
        self.summary = summary


def _c(exit_status: int, summary: str) -> CodeInfo:
    return CodeInfo(exit_status, summary)


# The registry. Keep it sorted by area; README's table is generated from it and a test checks they agree.
CODES: Final[Mapping[str, CodeInfo]] = {
    # command line and process
    "USAGE": _c(EXIT_USAGE, "bad command-line arguments"),
    "INTERNAL": _c(EXIT_INTERNAL, "unexpected failure; a traceback is written under $GIT_COMMON_DIR/agentops/log/"),
    "INTERRUPTED": _c(EXIT_INTERRUPTED, "interrupted by a signal (Ctrl-C)"),
    "PROCESS_SURVIVED_KILL": _c(
        EXIT_REFUSED, "a process the toolkit stopped was still alive seconds after SIGKILL (stuck in the kernel)"
    ),
    # repository
    "REPO_NOT_FOUND": _c(EXIT_REFUSED, "not inside a Git repository (or one pygit2 cannot open)"),
    "REPO_BARE": _c(EXIT_REFUSED, "the operation needs a working tree but the repository is bare"),
    "GIT_FAILED": _c(EXIT_REFUSED, "a git command the toolkit ran failed"),
    "GIT_TOO_OLD": _c(EXIT_REFUSED, "the installed git is older than the toolkit needs"),
    # refs and the journal
    "REF_NAME_INVALID": _c(EXIT_REFUSED, "a ref name git would refuse (check-ref-format rules)"),
    "REF_CONFLICT": _c(EXIT_REFUSED, "compare-and-swap lost: the ref did not hold the expected value"),
    "REF_LOCKED": _c(EXIT_REFUSED, "a ref stayed locked by another writer past the lock timeout"),
    "REF_SYMBOLIC": _c(EXIT_REFUSED, "refusing to compare-and-swap a symbolic ref"),
    "OBJECT_MISSING": _c(EXIT_REFUSED, "an object id does not name an object in this repository"),
    "JOURNAL_CONTENDED": _c(EXIT_REFUSED, "a journal mutation kept losing the compare-and-swap until its deadline"),
    "JOURNAL_CORRUPT": _c(EXIT_REFUSED, "a journal commit is not what the toolkit writes (not linear, bad event)"),
    "JOURNAL_PATH_INVALID": _c(EXIT_REFUSED, "a journal tree path is empty, absolute, has '.'/'..' or bad chars"),
    "ARTIFACT_MISSING": _c(EXIT_REFUSED, "a content-addressed artifact is not in the journal tree"),
    "ARTIFACT_CORRUPT": _c(EXIT_REFUSED, "a stored artifact does not hash to its name"),
    "NOTE_EXISTS": _c(EXIT_REFUSED, "the object already has a note on this notes ref; notes are never overwritten"),
    "NOTES_CONTENDED": _c(EXIT_REFUSED, "adding a note kept losing the compare-and-swap until its deadline"),
    "KEY_INVALID": _c(EXIT_REFUSED, "the repository's MAC key file is damaged (not 32 bytes)"),
    # documents, canonical JSON, seals
    "DOC_TOO_LARGE": _c(EXIT_REFUSED, "a document is over its size limit"),
    "JSON_INVALID": _c(EXIT_REFUSED, "not valid JSON (or duplicate keys, NaN/Infinity, bad UTF-8)"),
    "SCHEMA_INVALID": _c(EXIT_REFUSED, "a JSON document does not match its schema (the JSON path is named)"),
    "CANONICAL_UNSUPPORTED": _c(EXIT_REFUSED, "a value canonical JSON refuses (NaN/Infinity, non-string key...)"),
    "SEAL_INVALID": _c(EXIT_NEGATIVE, "a seal's digest does not match its value"),
    # private files and paths
    "PATH_ESCAPE": _c(EXIT_REFUSED, "a path leaves its root (absolute, '..', or a symlink pointing outside)"),
    "PATH_SYMLINK": _c(EXIT_REFUSED, "a private file or one of its directories is a symlink"),
    "PATH_INVALID": _c(EXIT_REFUSED, "a path is empty or contains NUL or control characters"),
    "PATH_NOT_REGULAR": _c(EXIT_REFUSED, "expected a regular file (found a directory, FIFO, device...)"),
    "LOCK_TIMEOUT": _c(EXIT_REFUSED, "a file lock stayed held by another process past the timeout"),
    "LOCK_HELD": _c(EXIT_REFUSED, "a file lock is held by another process"),
    "CONFIRMATION_REQUIRED": _c(EXIT_REFUSED, "not a terminal and no --yes: say --yes to confirm"),
    "OUTPUT_UNWRITABLE": _c(EXIT_REFUSED, "a file a command was asked to write (--html FILE) cannot be written there"),
    # policy and trust
    "POLICY_MISSING": _c(EXIT_REFUSED, "no .agentops/policy.toml here ('git agentops-init' writes one)"),
    "POLICY_TOML_INVALID": _c(EXIT_REFUSED, "the policy file is not valid TOML (line and column named)"),
    "POLICY_UNKNOWN_KEY": _c(EXIT_REFUSED, "the policy has a key the schema does not know (a typo must not pass)"),
    "POLICY_WRONG_TYPE": _c(EXIT_REFUSED, "a policy value has the wrong type"),
    "POLICY_VALUE_INVALID": _c(EXIT_REFUSED, "a policy value is out of range, malformed or not one of the choices"),
    "POLICY_SHELL_REQUIRED": _c(EXIT_REFUSED, "argv is a string but the command does not say shell = true"),
    "POLICY_DUPLICATE_ID": _c(EXIT_REFUSED, "two verify commands (or runners, or hosts) share an id"),
    "POLICY_INVALID": _c(EXIT_REFUSED, "the policy breaks a schema rule (missing key, too many items...)"),
    "POLICY_EXISTS": _c(EXIT_REFUSED, "a policy already exists; --force replaces it"),
    "POLICY_PROGRAM_MISSING": _c(
        EXIT_NEGATIVE, "a warning of policy check: a required command's program is not on PATH or made by no setup step"
    ),
    "POLICY_UNTRUSTED": _c(EXIT_REFUSED, "this exact policy is not trusted here: 'git agentops-policy trust'"),
    "TRUST_STORE_INVALID": _c(EXIT_REFUSED, "the trust store file is malformed; nothing was changed"),
    # environments (git agentops-env: what setup makes inside each checkout)
    "ENV_SETUP_FAILED": _c(EXIT_REFUSED, "making the checkout's environment failed (the tool's output tail is shown)"),
    "ENV_LOCK_UNUSABLE": _c(
        EXIT_REFUSED,
        "the environment cannot follow the project's lockfile (out of date, unreadable, uv not installable): it "
        "names the lock and the fix; nothing newer is installed instead",
    ),
    "ENV_PYTHON_MISSING": _c(EXIT_REFUSED, "no interpreter where setup was told to find it: install it, or --python"),
    # tasks
    "TASK_INVALID": _c(EXIT_REFUSED, "a task or criterion is malformed (ids, 2-5 root criteria, reasons...)"),
    "TASK_NOT_FOUND": _c(EXIT_REFUSED, "no task with that id"),
    "TASK_CONTRACT_CHANGED": _c(EXIT_REFUSED, "the task's contract hash is not the expected one (someone revised it)"),
    "TASK_RUNNER_UNKNOWN": _c(EXIT_REFUSED, "a criterion names an acceptance runner the policy does not define"),
    # verification
    "VERIFY_DIRTY": _c(EXIT_REFUSED, "the checkout has modified, staged or untracked files: commit or clean first"),
    "VERIFY_NO_COMMIT": _c(EXIT_REFUSED, "HEAD has no commit to verify"),
    "VERIFY_NO_COMMANDS": _c(EXIT_REFUSED, "the policy defines no verification commands"),
    "VERIFY_FAILED": _c(EXIT_NEGATIVE, "a required verification command failed, timed out or could not start"),
    "VERIFY_PARSE_FAILED": _c(EXIT_REFUSED, "test counts could not be parsed (bad JUnit XML, missing report...)"),
    "VERIFY_CHECKOUT_CHANGED": _c(
        EXIT_REFUSED, "the supervisor's verification checkout did not hold exactly the commit, before or after"
    ),
    "VERIFY_ENV_OUTSIDE": _c(
        EXIT_REFUSED, "the project's code resolves outside the checkout being verified (an editable install elsewhere)"
    ),
    "VERIFY_ENV_MISSING": _c(
        EXIT_REFUSED, "the commands' interpreter does not exist (nothing made it); names the setup step that makes it"
    ),
    "VERIFY_WORKER_REFUSED": _c(
        EXIT_REFUSED,
        "in a run's worker, what only a person's verification does: another task's runners, another checkout, "
        "another worker's instructions",
    ),
    "VERIFY_BOUND_POLICY_UNREADABLE": _c(
        EXIT_REFUSED,
        "in a run's worker, the run's bound policy (refs/agentops/runs/<run>/policy) is missing or damaged",
    ),
    "VERIFY_PATH_HIDDEN": _c(
        EXIT_REFUSED,
        "a path verify needs is unreadable here (an agent's sandbox hides the trust store, the private dir)",
    ),
    # receipts
    "RECEIPT_MISSING": _c(EXIT_NEGATIVE, "the commit has no receipt, or a commit of the range is covered by none"),
    "RECEIPT_NOT_COVERED": _c(
        EXIT_OK, "a note: a plain commit no receipt covers, listed because plain commits are allowed"
    ),
    "RECEIPT_POLICY_CHANGED": _c(
        EXIT_OK, "a note: a commit of the range changes the policy or signers without a receipt; its rules are not used"
    ),
    "RECEIPT_POLICY_SIGNED": _c(
        EXIT_OK, "a note: a person's policy commit, SSH-signed by a key the allowed signers in force list for 'git'"
    ),
    "RECEIPT_POLICY_UNSIGNED": _c(
        EXIT_NEGATIVE, "a commit that changes only the policy is not signed: a person signs it (git commit -S)"
    ),
    "RECEIPT_MALFORMED": _c(EXIT_NEGATIVE, "the receipt is not a well-formed DSSE envelope around a receipt statement"),
    "RECEIPT_SIGNATURE_INVALID": _c(EXIT_NEGATIVE, "a receipt signature is bad, or missing while one is required"),
    "RECEIPT_UNTRUSTED_SIGNER": _c(EXIT_NEGATIVE, "a receipt is signed by a key allowed_signers does not trust"),
    "RECEIPT_SIGNERS_INVALID": _c(
        EXIT_NEGATIVE, "the allowed_signers file has a malformed line or an option ssh-keygen does not define"
    ),
    "RECEIPT_SUBJECT_MISMATCH": _c(EXIT_NEGATIVE, "the receipt names another commit, tree or merge chain"),
    "RECEIPT_SEAL_INVALID": _c(EXIT_NEGATIVE, "a sealed part of the receipt does not match its digest"),
    "RECEIPT_INCOMPLETE": _c(EXIT_NEGATIVE, "the receipt records a task that was not delivered"),
    "RECEIPT_POLICY_MISMATCH": _c(
        EXIT_NEGATIVE, "the receipt's policy transitions do not chain, or its evidence names a policy the run lacked"
    ),
    "RECEIPT_SANDBOX_WEAKER": _c(
        EXIT_NEGATIVE, "--require-sandbox: an agent of the receipt ran at a weaker sandbox level, or none is recorded"
    ),
    "RECEIPT_SIGNING_FAILED": _c(EXIT_REFUSED, "ssh-keygen could not sign the receipt (key missing or unusable)"),
    # runs: supervisor, workers, requests (request codes are answered in the worker's response.json)
    "RUN_NOT_FOUND": _c(EXIT_REFUSED, "no run with that id ('git agentops-run list')"),
    "RUN_NOT_ACTIVE": _c(EXIT_REFUSED, "the run is not in a status that allows this (see 'git agentops-run status')"),
    "RUN_SUPERVISOR_ACTIVE": _c(EXIT_REFUSED, "another supervisor already serves this run"),
    "RUN_RESTART_STORM": _c(EXIT_REFUSED, "too many supervisor restarts since the last resume; the run is blocked"),
    "RUN_SERVICE_UNAVAILABLE": _c(
        EXIT_REFUSED, "AGENTOPS_SUPERVISOR_MANAGER names an unknown service manager, or one not available here"
    ),
    "RUN_SERVICE_FAILED": _c(EXIT_REFUSED, "the service manager (systemd-run, launchctl) did not start the supervisor"),
    "RUN_BUDGET_EXHAUSTED": _c(EXIT_NEGATIVE, "the run's active-time budget is spent (budget-limited)"),
    "RUN_WORKER_UNKNOWN": _c(EXIT_REFUSED, "no worker with that id in this run"),
    "RUN_WORKTREE_OWNERSHIP": _c(EXIT_REFUSED, "a worktree exists at the path but belongs to another run or worker"),
    "RUN_SETUP_FAILED": _c(EXIT_REFUSED, "a worktree setup step failed"),
    "RUN_WORKTREE_REMOVED": _c(EXIT_REFUSED, "a worker's worktree was removed by 'run clean'; no generation starts"),
    "WORKSPACE_NO_PORTS": _c(EXIT_REFUSED, "no block of free loopback ports is left for a workspace"),
    "WORKSPACE_INCLUDE_ESCAPE": _c(
        EXIT_REFUSED, "an [worktree] include path leaves the checkout, is a symlink out of it, or is tracked"
    ),
    "WORKSPACE_INCLUDE_MISSING": _c(EXIT_REFUSED, "an [worktree] include file is not in the person's checkout"),
    "SERVICE_NOT_READY": _c(EXIT_REFUSED, "a workspace's service did not become ready in its ready_timeout"),
    "SERVICE_EXITED": _c(EXIT_REFUSED, "a workspace's service exited before it was ready"),
    "SERVICE_FAILED": _c(EXIT_REFUSED, "a workspace service's init, attach, detach or stop command failed"),
    "CONTROL_INVALID": _c(
        EXIT_REFUSED, "a signed control is malformed, or names another run or id than its ref (refused, recorded)"
    ),
    "CONTROL_UNSIGNED": _c(EXIT_REFUSED, "a control from another machine carries no signature (refused, recorded)"),
    "CONTROL_SIGNATURE_INVALID": _c(EXIT_REFUSED, "a control's signature does not verify over it (refused, recorded)"),
    "CONTROL_NOT_ALLOWED": _c(
        EXIT_REFUSED, "a control's signer is not in the allowed signers, or [controls] does not let them decide that"
    ),
    "CONTROL_STALE": _c(
        EXIT_REFUSED, "the question, policy change or integration a control decides is no longer waiting for it"
    ),
    "CONTROL_PENDING": _c(
        EXIT_NEGATIVE, "a control was sent, but the supervising machine recorded no outcome within --wait (not lost)"
    ),
    "CONTROL_NO_KEY": _c(EXIT_USAGE, "no SSH signing key is configured to sign a control with"),
    "NOTIFY_CONFIG_INVALID": _c(EXIT_USAGE, "the [notify] table of the person's configuration is wrong"),
    "SALVAGE_EXISTS": _c(EXIT_REFUSED, "a salvage ref of that worker and generation already holds other work"),
    "SALVAGE_NOT_FOUND": _c(EXIT_NEGATIVE, "no salvage ref of that run, worker and generation"),
    "SALVAGE_RESTORE_REFUSED": _c(EXIT_REFUSED, "restoring salvage would overwrite files that differ"),
    "RUN_SETUP_RECOVERY_REQUIRED": _c(EXIT_REFUSED, "an interrupted setup is not replayed before a user resume"),
    "RUN_HOST_UNKNOWN": _c(EXIT_REFUSED, "the run names a host the policy does not define"),
    "RUN_HOST_FAILED": _c(EXIT_REFUSED, "the agent host could not be started"),
    "RUN_RECIPE_INVALID": _c(EXIT_REFUSED, "the scripted agent's recipe is malformed (its path and key are named)"),
    "RUN_QUESTION_UNKNOWN": _c(EXIT_REFUSED, "no open question with that id"),
    "RUN_REQUEST_INVALID": _c(EXIT_NEGATIVE, "malformed request: bad JSON, missing or unknown fields, not a file"),
    "RUN_REQUEST_TOO_LARGE": _c(EXIT_NEGATIVE, "the request file is over 128 KiB"),
    "RUN_REQUEST_STALE": _c(EXIT_NEGATIVE, "the request names another worker or an old generation"),
    "RUN_CONTRACT_CHANGED": _c(EXIT_NEGATIVE, "the request binds an old contract hash, or the run is not active"),
    "RUN_REQUEST_ID_CONFLICT": _c(EXIT_NEGATIVE, "the requestId was used before with different content"),
    "RUN_ACTION_UNAVAILABLE": _c(EXIT_NEGATIVE, "this action is not available (yet) in this run"),
    "RUN_COORDINATOR_REQUIRED": _c(EXIT_NEGATIVE, "only the coordinator may do this, and only after planning"),
    "RUN_COORDINATOR_FINALIZE_REQUIRED": _c(EXIT_NEGATIVE, "the coordinator finalizes; it does not hand off"),
    "RUN_PLAN_INVALID": _c(EXIT_NEGATIVE, "the plan is malformed or the root task already exists"),
    "RUN_DEPENDENCY_UNKNOWN": _c(EXIT_NEGATIVE, "a planned task depends on a task id the run does not have"),
    "RUN_DEPENDENCY_CYCLE": _c(EXIT_NEGATIVE, "the planned dependencies form a cycle"),
    "RUN_DEPENDENCY_CONFLICT": _c(EXIT_NEGATIVE, "dependency deliveries conflict when merged into a task's checkout"),
    "RUN_QUESTION_INVALID": _c(EXIT_NEGATIVE, "a question's prompt is empty or longer than 4096 characters"),
    "RUN_DELIVERY_DIRTY": _c(EXIT_NEGATIVE, "handoff with uncommitted changes in the worker's checkout"),
    "RUN_DELIVERY_CHANGED": _c(EXIT_NEGATIVE, "HEAD or the contract changed during the handoff"),
    "RUN_NO_CHANGE_FILES": _c(EXIT_NEGATIVE, "a handoff without commits must name its sourceFiles"),
    "RUN_VERIFICATION_FAILED": _c(EXIT_NEGATIVE, "the delivery failed verification; the worker restarts"),
    "RUN_DELIVERY_SECRET": _c(
        EXIT_NEGATIVE,
        "the delivery's commits add a secret-shaped string, a key file, or a secret the supervisor holds in any "
        "encoding (path and rule, never the value)",
    ),
    "RUN_NO_PROGRESS": _c(EXIT_NEGATIVE, "the same failure repeated without progress; the task is blocked"),
    "RUN_WORKER_EXITED": _c(EXIT_NEGATIVE, "the worker process exited without delivering"),
    "RUN_REQUEST_FAILED": _c(EXIT_NEGATIVE, "the supervisor failed while handling the request"),
    "RUN_DELIVERIES_PENDING": _c(
        EXIT_NEGATIVE, "finalize before every child task is delivered (or not the coordinator)"
    ),
    "RUN_INTEGRATION_CONFLICT": _c(
        EXIT_NEGATIVE, "two deliveries (or a delivery and the target) conflict; paths named"
    ),
    "RUN_REVIEW_BLOCKED": _c(EXIT_NEGATIVE, "a reviewer rejected the candidate or raised a blocking finding"),
    "RUN_TARGET_CONTENDED": _c(EXIT_NEGATIVE, "the target kept moving while the candidate was rebuilt"),
    "RUN_QUEUE_REPLACED": _c(EXIT_NEGATIVE, "a queue entry gave way to the same run's newer deliveries"),
    "QUEUE_ENTRY_STALE": _c(
        EXIT_NEGATIVE,
        "a queue entry does not match its run's own record (a rewound or replayed queue): never integrated",
    ),
    "QUEUE_LEASE_LOST": _c(EXIT_REFUSED, "another supervisor took the merge queue over; this one wrote nothing"),
    "RUN_TARGET_CHECKED_OUT_DIRTY": _c(
        EXIT_NEGATIVE, "the target is checked out with uncommitted changes: commit or stash them, then resume"
    ),
    "RUN_TARGET_NOT_FOLLOWED": _c(
        EXIT_OK,
        "a note: published to the remote; the local target was left alone (a dirty checkout, or it was elsewhere)",
    ),
    "RUN_SANDBOX_UNAVAILABLE": _c(
        EXIT_REFUSED,
        "the policy asks for walls this machine cannot give: Landlock when required, agents' own namespaces unless "
        '[sandbox] level = "landlock"',
    ),
    "RUN_SANDBOX_WEAKER": _c(
        EXIT_NEGATIVE,
        "a warning: agents run under Landlock alone (no namespaces here): the person's sockets are in reach",
    ),
    "RUN_AGENTS_AS_ROOT": _c(
        EXIT_NEGATIVE, "a warning: agents run as root (in their own user namespace, capability-less)"
    ),
    "RUN_UNSANDBOXED": _c(
        EXIT_NEGATIVE, 'a warning: agents run without the kernel sandbox (no Landlock, or [sandbox] mode = "none")'
    ),
    "RUN_STATE_TAMPERED": _c(
        EXIT_REFUSED, "a run ref holds a commit the supervisor did not write; the run is blocked, nothing is lost"
    ),
    "RUN_STATE_QUARANTINED": _c(
        EXIT_NEGATIVE,
        "a remote holds run state no supervisor wrote (MAC does not check): kept under refs/agentops-quarantine/, "
        "not adopted; the run goes on",
    ),
    "RUN_DELIVERY_PROTECTED_PATH": _c(
        EXIT_NEGATIVE, "the delivery changes a protected path (.agentops/**, allowed_signers, CI, hooks)"
    ),
    "RUN_DELIVERY_MISMATCH": _c(
        EXIT_REFUSED, "a delivery's state record, frozen ref, delivery note and evidence do not agree"
    ),
    "RUN_POLICY_STALE": _c(
        EXIT_NEGATIVE, "a policy request names another policy than the one in force, or comes while integrating"
    ),
    "RUN_POLICY_INVALID": _c(
        EXIT_NEGATIVE,
        "the proposed policy is invalid, changes nothing, or removes or weakens a guard (JSON path named)",
    ),
    "RUN_POLICY_UNAPPROVED": _c(EXIT_NEGATIVE, "an added or changed capability has no approval with a reason"),
    "RUN_POLICY_PERSON_REQUIRED": _c(
        EXIT_NEGATIVE,
        "only a person may approve this change (a setup step, a required reviewer's host), not the coordinator",
    ),
    "RUN_POLICY_BUDGET_RAISED": _c(
        EXIT_NEGATIVE, "a policy change cannot raise budget, max_cost_usd or max_tokens: 'run resume --add-budget'"
    ),
    "RUN_POLICY_CHANGES_DISABLED": _c(EXIT_NEGATIVE, 'the policy says [run] policy_changes = "never"'),
    "RUN_POLICY_TRANSITION_PENDING": _c(
        EXIT_NEGATIVE, "another policy transition is pending; nothing else starts until it ends"
    ),
    "RUN_POLICY_DIRTY": _c(EXIT_NEGATIVE, "a writer's checkout has uncommitted changes; the policy cannot change now"),
    "RUN_POLICY_PROPOSAL_CHANGED": _c(
        EXIT_NEGATIVE, "the proposal file (or its recorded copy) changed after it was proposed; propose again"
    ),
    "RUN_POLICY_REFUSED": _c(EXIT_NEGATIVE, "a person refused the policy transition ('git agentops-run refuse')"),
    "RUN_POLICY_TRANSITION_STALE": _c(EXIT_REFUSED, "the run's binding moved away from the transition's old policy"),
    "RUN_POLICY_SYNC_FAILED": _c(EXIT_REFUSED, "committing the bound policy in a worker's checkout failed"),
    "RUN_POLICY_RECOVERY_REQUIRED": _c(
        EXIT_REFUSED, "a bound policy transition could not complete; the run is blocked until 'run resume'"
    ),
    "RUN_TRANSITION_UNKNOWN": _c(EXIT_REFUSED, "no policy transition with that id (or prefix) in this run"),
    "RUN_APPROVAL_AGENT": _c(EXIT_REFUSED, "'run approve' refuses to run inside an agent's environment"),
    "RUN_LEASE_HELD": _c(EXIT_REFUSED, "another machine's supervisor holds the run's lease (the holder is named)"),
    "RUN_LEASE_LOST": _c(EXIT_REFUSED, "another machine took the run over; this one stopped and wrote nothing"),
    "SYNC_REMOTE_UNREACHABLE": _c(EXIT_REFUSED, "the remote cannot be reached; nothing was changed (retry later)"),
    "SYNC_REMOTE_MOVED": _c(EXIT_REFUSED, "the remote moved under an atomic push, which changed nothing; fetch again"),
    "SYNC_PUSH_REFUSED": _c(EXIT_REFUSED, "the server refused the push (its hook's message shown); nothing changed"),
    "SYNC_KEY_EXISTS": _c(
        EXIT_REFUSED, "this repository has a MAC key of its own; import the team's before its first run"
    ),
    "SYNC_DIVERGED": _c(
        EXIT_NEGATIVE, "a ref diverged from the remote (not forced) or two notes for one object differ"
    ),
    "SYNC_NOTES_KEPT": _c(
        EXIT_NEGATIVE, "the remote, though ahead, dropped or rewrote notes this repository has; the local ones stay"
    ),
    "POLICY_TRUST_AGENT": _c(EXIT_REFUSED, "'policy trust' refuses to run inside an agent's environment"),
    "REQUEST_NO_MAILBOX": _c(EXIT_REFUSED, "not in a worker worktree (no mailbox instructions found)"),
    "REQUEST_TIMEOUT": _c(EXIT_NEGATIVE, "no response arrived before --timeout"),
    # hooks (each refusal says what to do instead)
    "HOOK_STALE_WORKER": _c(EXIT_NEGATIVE, "commit from a worker that is not the current generation of an active run"),
    "HOOK_PRIVATE_PATH": _c(EXIT_NEGATIVE, "mailbox or other private files are staged"),
    "HOOK_POLICY_CHANGE": _c(EXIT_NEGATIVE, "a worker commits a change to .agentops/policy.toml"),
    "HOOK_SECRET": _c(EXIT_NEGATIVE, "staged content contains a secret-shaped string (path and line named)"),
    "HOOK_MERGE_NOT_DELIVERY": _c(EXIT_NEGATIVE, "a worker merges a commit that is not a dependency's frozen delivery"),
    "HOOK_RECEIPT_INVALID": _c(EXIT_NEGATIVE, "pushing the target to a commit without a valid receipt"),
    "HOOK_REF_CREATE_ONLY": _c(EXIT_NEGATIVE, "a frozen delivery ref would be moved or deleted"),
    "HOOK_REF_FAST_FORWARD_ONLY": _c(EXIT_NEGATIVE, "run state, journal or agentops notes would move backwards"),
    "HOOK_REF_DELETE": _c(EXIT_NEGATIVE, "an agentops ref or the integration target would be deleted"),
    "HOOK_TARGET_REWOUND": _c(
        EXIT_NEGATIVE, "the integration target would not move forward (a non-fast-forward, --force or not)"
    ),
    "HOOK_NOTES_REWRITTEN": _c(
        EXIT_NEGATIVE, "a push drops or rewrites a receipt, delivery or evidence note the server holds"
    ),
    "HOOK_FAILED": _c(EXIT_NEGATIVE, "the hook could not check an agentops ref, so it refuses (fail closed)"),
    "HOOKS_CONFLICT": _c(EXIT_REFUSED, "a hook file is in the way and cannot be chained (not a regular file)"),
    "HOOK_GUARD_UNWRITABLE": _c(
        EXIT_REFUSED, "a host's guard hook files could not be written into a worker worktree (an OS error)"
    ),
    # success codes of responses (stable too; exit 0 from 'git agentops-request')
    "RUN_PLAN_CREATED": _c(EXIT_OK, "the root task was created"),
    "RUN_WORKER_PLANNED": _c(EXIT_OK, "a child task was planned"),
    "RUN_AWAITING_INPUT": _c(EXIT_OK, "the question was recorded; writers stop until it is answered"),
    "RUN_WORKER_DELIVERED": _c(EXIT_OK, "the delivery passed verification and is frozen"),
    "RUN_HANDOFF_ACCEPTED": _c(EXIT_OK, "the supervisor took the handoff and verifies it itself: end your turn"),
    "RUN_FINALIZE_ACCEPTED": _c(EXIT_OK, "the supervisor took the finalize and integrates: end your turn"),
    "RUN_POLICY_PENDING": _c(EXIT_OK, "the policy transition is recorded; it is applied once approved"),
    "RUN_COMPLETE": _c(EXIT_OK, "integrated, published and receipted"),
}


class AgentOpsError(Exception):
    """A refusal with a stable code. ``details`` is JSON-able context for ``--json`` output.

    Made with a code that has a :class:`CodedError` class, it is an instance of that class (see the module).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        made = BY_CODE.get(args[0], cls) if cls is AgentOpsError and args and isinstance(args[0], str) else cls
        return super().__new__(made, *args, **kwargs)  # type: ignore[return-value]  # a subclass of cls: Self holds

    def __init__(self, code: str, message: str, *, details: Mapping[str, Any] | None = None) -> None:
        if code not in CODES:
            raise ValueError(f"unregistered error code {code!r}; add it to git_agentops.errors.CODES")
        fixed = BY_CODE.get(code)
        if fixed is not None and not isinstance(self, fixed):
            raise TypeError(f"{code} is raised as {fixed.__name__} (or a subclass), not {type(self).__name__}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    @property
    def exit_status(self) -> int:
        return CODES[self.code].exit_status

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"code": self.code, "message": self.message, "exitStatus": self.exit_status}
        if self.details:
            doc["details"] = self.details
        return doc

    def __str__(self) -> str:
        return f"error[{self.code}]: {self.message}"


BY_CODE: dict[str, type[CodedError]] = {}
"""Each branched-on code's class (filled by :meth:`CodedError.__init_subclass__`)."""


class CodedError(AgentOpsError):
    """An :class:`AgentOpsError` whose class fixes its code: ``class LockHeld(CodedError, code="LOCK_HELD")``.

    Raised as ``LockHeld(message, details=...)``, or made by ``AgentOpsError("LOCK_HELD", message)``; either way its
    code, message, ``error[CODE]: ...`` line and exit status are the ones ``AgentOpsError`` would have had.
    """

    CODE: str = ""

    def __init_subclass__(cls, code: str = "", **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not code:
            return  # a subclass of a coded class (JournalTampered of StateTampered): the same code
        if code not in CODES or code in BY_CODE:
            raise ValueError(f"{cls.__name__}: code {code!r} is unregistered or has a class already")
        cls.CODE = code
        BY_CODE[code] = cls

    def __init__(self, *args: str, details: Mapping[str, Any] | None = None) -> None:
        if len(args) not in (1, 2) or (len(args) == 2 and args[0] != self.CODE):
            raise TypeError(f"{type(self).__name__}(message) or AgentOpsError({self.CODE!r}, message)")
        super().__init__(self.CODE, args[-1], details=details)


# The codes callers branch on, one class each (caught by type: ``except LockHeld``).
class Usage(CodedError, code="USAGE"):
    """Bad arguments (a caller turns it into the refusal of the step that was given them)."""


class RepoBare(CodedError, code="REPO_BARE"):
    """The repository has no working tree (a server's): plumbing reads it as it is."""


class NoteExists(CodedError, code="NOTE_EXISTS"):
    """The object has a note on that ref already (a receipt added by a crashed attempt)."""


class DocTooLarge(CodedError, code="DOC_TOO_LARGE"):
    """A document over its size limit (a request is refused as too large rather than invalid)."""


class LockHeld(CodedError, code="LOCK_HELD"):
    """A non-blocking file lock another process holds (a supervisor serving the run, a busy slot)."""


class CheckoutChanged(CodedError, code="VERIFY_CHECKOUT_CHANGED"):
    """The verification checkout did not hold exactly the commit (it is wiped when its repository was written)."""


class ControlStale(CodedError, code="CONTROL_STALE"):
    """What a signed control decides is no longer waiting for it, or the control was handled already."""


class QuestionUnknown(CodedError, code="RUN_QUESTION_UNKNOWN"):
    """No open question with that id (answered already, or never asked)."""


class TransitionStale(CodedError, code="RUN_POLICY_TRANSITION_STALE"):
    """The policy transition ended (complete or refused): there is nothing left to decide."""


class TransitionUnknown(CodedError, code="RUN_TRANSITION_UNKNOWN"):
    """No policy transition with that id (or a unique prefix of it)."""


class SignatureInvalid(CodedError, code="RECEIPT_SIGNATURE_INVALID"):
    """A signature that does not verify (as opposed to a good one by a key that is not allowed)."""


class RunNotActive(CodedError, code="RUN_NOT_ACTIVE"):
    """The run's status does not allow the step (a worker is not started, not blocked, for it)."""


class SupervisorActive(CodedError, code="RUN_SUPERVISOR_ACTIVE"):
    """Another supervisor serves the run already."""


class ServiceFailed(CodedError, code="RUN_SERVICE_FAILED"):
    """The service manager did not start the supervisor (what the supervisor did instead may say more)."""


class SetupFailed(CodedError, code="RUN_SETUP_FAILED"):
    """A worktree setup step failed: its worker is blocked, the run goes on."""


class SetupRecoveryRequired(CodedError, code="RUN_SETUP_RECOVERY_REQUIRED"):
    """An interrupted setup is not replayed before a person resumes the run: its worker is blocked."""


class SandboxUnavailable(CodedError, code="RUN_SANDBOX_UNAVAILABLE"):
    """The sandbox the policy requires cannot be had: the worker is blocked."""


class StateTampered(CodedError, code="RUN_STATE_TAMPERED"):
    """A run's journal holds a commit the toolkit did not write: the run is blocked, not served."""


class TransitionPending(CodedError, code="RUN_POLICY_TRANSITION_PENDING"):
    """A policy transition is under way: no generation starts meanwhile."""


class LeaseHeld(CodedError, code="RUN_LEASE_HELD"):
    """Another machine's supervisor holds the run's lease."""


class LeaseLost(CodedError, code="RUN_LEASE_LOST"):
    """Another machine took the run over: this one stops its agents."""


class QueueLeaseLost(CodedError, code="QUEUE_LEASE_LOST"):
    """Another supervisor took the merge queue over: this one wrote nothing and waits again."""


class TargetCheckedOutDirty(CodedError, code="RUN_TARGET_CHECKED_OUT_DIRTY"):
    """A checkout of the target has uncommitted changes: nothing is published until they are committed or stashed."""


class RemoteUnreachable(CodedError, code="SYNC_REMOTE_UNREACHABLE"):
    """The remote cannot be reached: tried again with patience, then the run waits."""


class RemoteMoved(CodedError, code="SYNC_REMOTE_MOVED"):
    """The remote moved under an atomic push: fetch and try again."""


class PushRefused(CodedError, code="SYNC_PUSH_REFUSED"):
    """The server refused the push: the run waits with everything kept."""


class RequestTimeout(CodedError, code="REQUEST_TIMEOUT"):
    """No response arrived before the timeout."""


def raised_as(error: BaseException) -> str:
    """The name of the class ``error`` was raised as before the coded classes existed: a coded class made by
    ``AgentOpsError(code, ...)`` says ``AgentOpsError``. A failure's fingerprint digests it, and stays the same."""
    return next(c.__name__ for c in type(error).__mro__ if c is not CodedError and c not in BY_CODE.values())


def exit_status_for(code: str) -> int:
    """The exit status of a registered code (INTERNAL for an unknown one)."""
    info = CODES.get(code)
    return info.exit_status if info else EXIT_INTERNAL
