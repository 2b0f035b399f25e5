"""Secrets in deliveries, and agent-supplied text made safe to record.

The pre-commit hook refuses a staged secret, but a hook is advice to an agent: ``git commit --no-verify`` skips it,
and an agent may commit with plumbing that runs no hook at all. Integration then publishes the delivered history to
the target, where it is forever and travels with every clone. So before a handoff is verified, the supervisor scans
what the delivery adds (:func:`scan_delivery`) and refuses it with ``RUN_DELIVERY_SECRET`` (:func:`secrets_refusal`),
naming each path, line and rule -- never the value.

What is scanned:

* **every commit the delivery adds** (``base..head``), each against its first parent -- not only the final tree, since
  a key committed and deleted again by a later commit is still in the history that integration publishes;
* **added and modified blobs only**, found by comparing trees entry by entry (an unchanged subtree is never opened);
  a finding whose value (rule and digest) is already in the blob the commit replaced is not the delivery's doing and
  is not reported, so a fixture the repository already holds does not refuse every change to its file;
* **bytes, whatever ``.gitattributes`` says**: blobs are read from the object database and decoded with
  ``errors="replace"``, so marking a file ``binary`` (or ``-diff``) hides nothing from the rules;
* the rules of the hook -- :func:`~git_agentops.verify.redact.find_secrets` with the policy's ``deny_patterns``, on
  the content and on the path itself (a tree publishes its file names too) -- plus **path rules** on file names:
  ``[guardrails] secret_paths`` (:data:`~git_agentops.model.policy.DEFAULT_SECRET_PATHS` by default: private SSH
  keys ``id_*`` but not ``*.pub``, ``*.pem``, ``*.key``, ``*.p12``, ``*.pfx``). A pattern without ``/`` matches the
  file name, one with ``/`` the whole path (``fnmatch``, case-insensitive); ``!`` negates, and the last matching
  pattern decides, as in ``.gitignore``. ``id_*`` also matches ``id_map.json``: a project with such names narrows
  the list (``["id_rsa", "id_ed25519", ...]``);
* the **secrets the supervisor holds** (:class:`~git_agentops.verify.credentials.HeldSecrets`: the values of its
  environment's credential variables, scrubbed from agents or passed to one by ``pass_env``), searched exactly, in
  content and path, plainly and in every keyless encoding :mod:`git_agentops.verify.held` knows -- base64 at any
  alignment, hex, URL-encoding, inside gzip, zlib, bzip2, xz or zip, inside base64 or hex runs -- and reported as
  ``held-secret:<VARIABLE> (<encoding>)``. An agent never sees most of them; one it was given (its model's key) it
  may use, never publish.

The work is capped, and the cap fails closed: a blob over :data:`MAX_BLOB_BYTES`, blobs past
:data:`MAX_TOTAL_BYTES` in all, or commits past :data:`MAX_COMMITS` are reported as ``unscannable`` findings, so a
secret cannot be smuggled past the scan by padding it. A delivery that really needs such a blob is delivered with
``[guardrails] secret_scanning = false``, which turns this off as it turns off the hook.

:func:`clean_text` is the other half of not publishing what an agent wrote: every agent-supplied string that goes into
a state event, a log line or a stored response is redacted (built-in rules and the policy's patterns), stripped of
control and bidirectional-override characters (shown escaped) and cut to a length.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import pygit2

from ..canonical import sha256_hex
from ..errors import AgentOpsError
from ..gitstore.repo import Store
from ..model.policy import Policy
from ..runs.jobs import Refused, Request
from ..verify.credentials import NO_HELD_SECRETS, HeldSecrets
from ..verify.held import DEFLATE_NAMES, find_held, redact_held
from ..verify.redact import find_secrets, redact
from ..workspace.localfiles import refusal_patterns

MAX_BLOB_BYTES: Final = 8 * 1024 * 1024
MAX_TOTAL_BYTES: Final = 64 * 1024 * 1024
MAX_COMMITS: Final = 10_000
SHOWN: Final = 20  # findings named in a refusal message; the rest are counted

_BLOB_MODES: Final = frozenset({pygit2.enums.FileMode.BLOB, pygit2.enums.FileMode.BLOB_EXECUTABLE})
_LINK_MODE: Final = pygit2.enums.FileMode.LINK
_TREE_MODE: Final = pygit2.enums.FileMode.TREE
# C0 and C1 controls, zero-width and bidirectional controls: a log line must show what is there, not be rewritten
# by it. Tab and newline stay in multi-line text.
_UNSAFE_LINE: Final = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
_UNSAFE_TEXT: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


# -- agent-supplied text ---------------------------------------------------------------------------------------------


def clean_text(text: str, limit: int, patterns: Sequence[str] = (), *, multiline: bool = False) -> str:
    """``text`` fit for a state event or a log: secrets redacted, unsafe characters escaped, at most ``limit``.

    Redaction runs on the text before it is cut (a cut could split a secret into unrecognisable halves), but only on
    a bounded head of it, and once more after the cut (a cut can also complete a shape: ``AKIA`` and 17 characters
    is no key, its first 20 are).
    """
    head = text[: limit * 4 + 1024]
    unsafe = _UNSAFE_TEXT if multiline else _UNSAFE_LINE
    shown = unsafe.sub(_escape, _redact(head, patterns))
    if len(shown) > limit or len(head) < len(text):
        shown = shown[: max(limit - 1, 0)] + "…"
    return _redact(shown, patterns)[:limit]


def _redact(text: str, patterns: Sequence[str]) -> str:
    try:
        return redact(text, patterns)
    except AgentOpsError:  # a pattern the policy check would have refused: the built-in rules still apply
        return redact(text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


# -- scanning a delivery ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    """A secret a delivery adds: where (``path``, 1-based ``line`` or None for a path rule), which ``rule``, and the
    ``commit`` that added it. The value is never kept."""

    path: str
    rule: str
    line: int | None
    commit: str

    def render(self, patterns: Sequence[str] = (), held: HeldSecrets = NO_HELD_SECRETS) -> str:
        """``path[:line]: rule`` with the path made safe to show (a file name can itself be secret-shaped, or a held
        secret encoded)."""
        where = shown_path(self.path, patterns, held) + (f":{self.line}" if self.line is not None else "")
        return f"{where}: {self.rule}"


def shown_path(path: str, patterns: Sequence[str], held: HeldSecrets) -> str:
    """``path`` as a refusal may show it: held secrets and secret shapes redacted, unsafe characters escaped."""
    return clean_text(redact_held(path, held), 300, patterns)


def path_rule(path: str, rules: Sequence[str]) -> str | None:
    """The pattern of ``rules`` that marks ``path`` as a secret file, or None (the last matching pattern decides)."""
    name = path.rsplit("/", 1)[-1].lower()
    decided: str | None = None
    for rule in rules:
        negated = rule.startswith("!")
        pattern = (rule[1:] if negated else rule).lower()
        subject = path.lower() if "/" in pattern else name
        if fnmatch.fnmatchcase(subject, pattern):
            decided = None if negated else rule
    return decided


class _Scan:
    """One scan's state: the budget left and each blob's findings, computed once however many commits carry it."""

    def __init__(
        self, repo: pygit2.Repository, patterns: Sequence[str], path_rules: Sequence[str], held: HeldSecrets
    ) -> None:
        self.repo = repo
        self.patterns = tuple(patterns)
        self.path_rules = tuple(path_rules)
        self.held = held
        self.budget = MAX_TOTAL_BYTES
        self.memo: dict[tuple[pygit2.Oid, str], list[tuple[str, int | None, str]] | str] = {}

    def blob(self, oid: pygit2.Oid, name: str = "") -> list[tuple[str, int | None, str]] | str:
        """``(rule, line, digest of the value)`` of each secret in the blob, or why it could not be scanned.

        ``name`` is the file's name: a ``*.gz`` may hold a raw deflate stream (:func:`~git_agentops.verify.held.
        find_held`)."""
        key = (oid, name if name.lower().endswith(DEFLATE_NAMES) else "")
        if key in self.memo:
            return self.memo[key]
        _kind, size = self.repo.odb.read_header(oid)
        result: list[tuple[str, int | None, str]] | str
        if size > MAX_BLOB_BYTES:
            result = f"unscannable: {size} bytes, over the {MAX_BLOB_BYTES // (1024 * 1024)} MiB scanned per file"
        elif size > self.budget:
            result = f"unscannable: past the {MAX_TOTAL_BYTES // (1024 * 1024)} MiB scanned per delivery"
        else:
            self.budget -= size
            result = self._findings(self.repo[oid].read_raw(), key[1])
        self.memo[key] = result
        return result

    def _findings(self, data: bytes, name: str) -> list[tuple[str, int | None, str]]:
        text = data.decode("utf-8", errors="replace")
        starts = [0] + [m.end() for m in re.finditer("\n", text)]
        out: list[tuple[str, int | None, str]] = []
        for found in find_secrets(text, self.patterns):
            start = starts[found.line - 1] + found.column - 1
            out.append((found.rule, found.line, sha256_hex(text[start : start + found.length])))
        held = find_held(data, self.held, name=name)
        out += [(found.rule, found.line, found.rule) for found in held.found]  # the rule names the value already
        if held.unscannable is not None:
            out.append((held.unscannable, None, ""))
        return out

    def path(self, path: str) -> Iterator[str]:
        """The rules a path itself breaks: a path is published as surely as a file's content."""
        for shaped in find_secrets(path, self.patterns):
            yield f"{shaped.rule} in the path"
        for held in find_held(path.encode("utf-8", errors="surrogateescape"), self.held).found:
            yield f"{held.rule} in the path"

    def commit(self, commit: pygit2.Commit) -> Iterator[Finding]:
        """What ``commit`` adds against its first parent (everything, for a root commit)."""
        parent = commit.parents[0].tree if commit.parents else None
        short = str(commit.id)[:12]
        for path, new, old, mode in _changed_blobs(commit.tree, parent, ""):
            if mode in _BLOB_MODES and (rule := path_rule(path, self.path_rules)) is not None:
                yield Finding(path, f"file name matches {rule!r}", None, short)
            for rule in self.path(path):
                yield Finding(path, rule, None, short)
            found = self.blob(new, path.rsplit("/", 1)[-1])
            if isinstance(found, str):
                yield Finding(path, found, None, short)
                continue
            before = self.blob(old, path.rsplit("/", 1)[-1]) if old is not None else []
            # what the replaced blob already held is not this commit's doing; a blob that cannot be searched always is
            known = set() if isinstance(before, str) else {(rule, value) for rule, _line, value in before if value}
            for rule, line, value in found:
                if (rule, value) not in known:
                    yield Finding(path, rule, line, short)


def _changed_blobs(
    new: pygit2.Tree, old: pygit2.Tree | None, prefix: str
) -> Iterator[tuple[str, pygit2.Oid, pygit2.Oid | None, int]]:
    """``(path, new blob, replaced blob or None, mode)`` of each file and symlink added or changed from ``old``."""
    before = {entry.raw_name or b"": entry for entry in old} if old is not None else {}
    for entry in new:
        name = entry.raw_name or b""  # every tree entry has a name; None only for objects looked up by id
        previous = before.get(name)
        if previous is not None and previous.id == entry.id and previous.filemode == entry.filemode:
            continue  # an unchanged file, or a whole unchanged subtree: never opened
        path = prefix + name.decode("utf-8", errors="replace")
        if entry.filemode == _TREE_MODE:
            assert isinstance(entry, pygit2.Tree)
            older = previous if isinstance(previous, pygit2.Tree) else None
            yield from _changed_blobs(entry, older, path + "/")
        elif entry.filemode in _BLOB_MODES or entry.filemode == _LINK_MODE:  # submodules (commits) hold no bytes here
            replaced = previous.id if previous is not None and previous.type_str == "blob" else None
            yield path, entry.id, replaced, entry.filemode


def scan_delivery(
    store: Store,
    base: str,
    head: str,
    *,
    patterns: Sequence[str],
    path_rules: Sequence[str],
    held: HeldSecrets = NO_HELD_SECRETS,
) -> list[Finding]:
    """Every secret the commits ``base..head`` add (see the module docstring), in history order, each once;
    ``held`` are the supervisor's secret values, searched for in every encoding.

    ``OBJECT_MISSING`` when ``base`` or ``head`` names no commit.
    """
    repo = store.repo
    head_id = store.resolve_commit(head).id
    base_id = store.resolve_commit(base).id
    walker = repo.walk(head_id, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    walker.hide(base_id)
    scan = _Scan(repo, patterns, path_rules, held)
    findings: list[Finding] = []
    seen: set[tuple[str, str, int | None]] = set()
    for count, commit in enumerate(walker):
        if count >= MAX_COMMITS:
            findings.append(Finding("(history)", f"unscannable: over {MAX_COMMITS} commits", None, str(commit.id)[:12]))
            break
        for finding in scan.commit(commit):
            key = (finding.path, finding.rule, finding.line)
            if key not in seen:
                seen.add(key)
                findings.append(finding)
    return findings


def secrets_refusal(
    store: Store, policy: Policy, request: Request, *, base: str, head: str, held: HeldSecrets = NO_HELD_SECRETS
) -> Refused | None:
    """``RUN_DELIVERY_SECRET`` naming what :func:`scan_delivery` finds in ``base..head`` (``held``: the supervisor's
    secret values); None when nothing is found or ``[guardrails] secret_scanning = false``."""
    if not policy.secret_scanning:
        return None
    # the person's local files ([worktree] include) are in every worktree and never belong in a delivery
    path_rules = (*policy.secret_paths, *refusal_patterns(policy.workspace.include))
    findings = scan_delivery(store, base, head, patterns=policy.deny_patterns, path_rules=path_rules, held=held)
    if not findings:
        return None
    shown = "; ".join(f.render(policy.deny_patterns, held) for f in findings[:SHOWN])
    more = f"; and {len(findings) - SHOWN} more" if len(findings) > SHOWN else ""
    held_note = (
        " A held-secret is the value of a credential in the supervisor's environment, which is never published, "
        "in any encoding."
        if any(f.rule.startswith("held-secret:") for f in findings)
        else ""
    )
    message = (
        f"{head[:12]} adds secret-shaped content (values not shown): {shown}{more}. Take it out of every commit since "
        f"the task's base {base[:12]} -- amend or rebase; a later commit deleting it leaves it in the history that "
        "would be published -- rotate it if it was real, then hand off again (if it is no secret, narrow "
        f"[guardrails] secret_paths or deny_patterns in the policy).{held_note}"
    )
    detail = {"findings": sorted([shown_path(f.path, policy.deny_patterns, held), f.rule] for f in findings)}
    return Refused(AgentOpsError("RUN_DELIVERY_SECRET", message), request, detail, head)
