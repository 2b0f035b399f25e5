"""The hook hot path: decide quickly, import almost nothing, and only then hand over to the full rules.

Hooks run on every commit, push and ref update, so the common case must cost little more than starting Python:

* ``reference-transaction`` returns at once unless the state is ``prepared`` and a ref of ours
  (``refs/agentops/``, ``refs/notes/agentops/``) is in the transaction;
* ``pre-commit`` outside a run worktree only scans the staged diff for secrets, and only imports the secret rules
  when the diff contains something secret-shaped (a key header, a known token prefix) or the policy adds patterns;
* ``pre-merge-commit``/``post-merge`` outside a worker worktree return at once.

Git is asked through ``posix_spawn`` and pipes rather than :mod:`subprocess` (whose import alone costs more than
the whole fast path), and the policy's guardrails come from the validated-policy cache keyed by the policy file's
bytes. Nothing here imports pygit2 or jsonschema.
"""

from __future__ import annotations

import os

from .names import HookName
from .where import NAMESPACES, Where, git, locate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

STDIN_HOOKS = frozenset({HookName.PRE_PUSH, HookName.REFERENCE_TRANSACTION, HookName.PRE_RECEIVE})
# Literals one of which is in every match of the built-in secret rules (:mod:`git_agentops.verify.redact`); a
# staged diff holding none of them needs no regex scan. tests/hooks/test_hook_rules.py checks this stays true.
SECRET_MARKERS = tuple(
    m.encode()
    for m in (
        "PRIVATE KEY",
        *("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "APKA", "ABIA", "ACCA", "A3T"),
        *("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
        *("glpat-", "gldt-", "glrt-", "glptt-", "glft-", "glsoat-"),
        *("xox", "xapp-", "sk-", "AIza", "_live_", "npm_", "eyJ"),
    )
)


def might_hold_secret(diff: bytes) -> bool:
    """False only when no built-in secret rule can match ``diff``."""
    return any(marker in diff for marker in SECRET_MARKERS) or b"secret" in diff.lower()


def guardrails(where: Where) -> tuple[bool, tuple[str, ...]]:
    """(secret scanning on?, extra deny patterns) from the checkout's policy; scanning is on by default."""
    if where.toplevel is None:
        return True, ()
    path = os.path.join(where.toplevel, ".agentops", "policy.toml")
    try:
        with open(path, "rb") as handle:
            data = handle.read(256 * 1024 + 1)
    except OSError:
        return True, ()
    import json

    from ..policy.cache import CACHE_DIR, cache_key

    cached = os.path.join(where.common_dir, *CACHE_DIR, f"{cache_key(data)}.json")
    try:
        with open(cached, "rb") as handle:
            doc = json.loads(handle.read())
    except (OSError, ValueError):
        doc = None
    if doc is None:
        from pathlib import Path

        from ..errors import AgentOpsError
        from ..policy.load import cache_dir_for, policy_from_bytes

        try:
            doc = dict(policy_from_bytes(data, cache_dir=cache_dir_for(Path(where.common_dir))).doc)
        except AgentOpsError:
            return True, ()  # an invalid policy cannot turn scanning off
    rails = doc.get("guardrails", {})
    return bool(rails.get("secret_scanning", True)), tuple(rails.get("deny_patterns", ()))


def staged_diff(where: Where) -> bytes:
    status, out = git(
        where,
        [
            "-c",
            "core.quotepath=false",
            "diff",
            "--cached",
            "--no-color",
            "--no-ext-diff",
            "--unified=0",
            "--diff-filter=ACMR",
            "--no-renames",
        ],
        cwd=where.toplevel,
    )
    return out if status == 0 else b""


def secret_refusals(where: Where, patterns: Sequence[str]) -> list[tuple[str, str]]:
    """Secret-shaped strings in the staged additions, as (code, message) with the value redacted."""
    diff = staged_diff(where)
    if not diff or (not patterns and not might_hold_secret(diff)):
        return []
    from ..verify.redact import find_secrets, redact

    found: list[str] = []
    for path, lines in _added_lines(diff):
        text = "\n".join(line for _, line in lines)
        for finding in find_secrets(text, patterns):
            number, line = lines[finding.line - 1]
            found.append(f"{path}:{number}: {finding.rule} ({redact(line, patterns).strip()[:120]})")
    if not found:
        return []
    shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
    return [
        (
            "HOOK_SECRET",
            f"secret-shaped content staged: {shown}. Remove it from the index (and rotate it if it "
            "was real), or add a narrower rule to [guardrails] in the policy",
        )
    ]


def _added_lines(diff: bytes) -> list[tuple[str, list[tuple[int, str]]]]:
    files: list[tuple[str, list[tuple[int, str]]]] = []
    number = 0
    for raw in diff.split(b"\n"):
        line = raw.decode("utf-8", errors="replace")
        if line.startswith("+++ "):
            path = line[4:]
            files.append((path[2:] if path.startswith("b/") else path, []))
        elif line.startswith("@@"):
            plus = line.split("+", 1)[1].split(" ", 1)[0]
            number = int(plus.split(",", 1)[0])
        elif line.startswith("+") and files:
            files[-1][1].append((number, line[1:]))
            number += 1
    return [(path, lines) for path, lines in files if lines]


def run_worktree(where: Where) -> bool:
    return os.path.isfile(os.path.join(where.git_dir, "agentops", "worktree.json"))


def reference_transaction(where: Where, args: Sequence[str], stdin: bytes) -> list[tuple[str, str]]:
    if not args or args[0] != "prepared" or not any(ns in stdin for ns in NAMESPACES):
        return []
    from .rules import check_ref_updates

    updates = []
    for line in stdin.decode("utf-8", errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2].encode().startswith(NAMESPACES):
            updates.append((parts[2], None, parts[1]))  # the old value is read from the repository itself
    return check_ref_updates(where, updates)


def dispatch(
    hook: str, args: Sequence[str], *, cwd: str, env: Mapping[str, str], stdin: bytes
) -> tuple[int, list[str]]:
    """Run one hook; returns (exit status, lines for stderr). Refusals are ``error[CODE]: ...`` lines."""
    where = locate(cwd, env)
    refusals: list[tuple[str, str]] = []
    notes: list[str] = []
    if hook == HookName.REFERENCE_TRANSACTION:
        refusals = reference_transaction(where, args, stdin)
    elif hook == HookName.PRE_COMMIT:
        if run_worktree(where):
            from .rules import worker_commit_refusals

            refusals += worker_commit_refusals(where, env)
        scan, patterns = guardrails(where)
        if scan:
            refusals += secret_refusals(where, patterns)
    elif hook in (HookName.PRE_MERGE_COMMIT, HookName.POST_MERGE):
        if run_worktree(where):
            from .rules import merge_refusals

            refusals, notes = merge_refusals(where, hook)
    elif hook == HookName.PRE_PUSH:
        from .rules import push_refusals

        refusals = push_refusals(where, args, stdin, env)
    elif hook == HookName.PRE_RECEIVE:
        from .rules import receive_refusals

        refusals = receive_refusals(where, stdin)
    else:
        return 2, [
            f"error[USAGE]: unknown hook type {hook!r} (pre-commit, pre-merge-commit, post-merge, pre-push, "
            "reference-transaction, pre-receive)"
        ]
    lines = notes + [f"error[{code}]: {message}" for code, message in refusals]
    if hook == HookName.POST_MERGE:  # cannot refuse: it already happened
        return 0, [line.replace("error[", "warning[", 1) for line in lines]
    return (1 if refusals else 0), lines
