"""What CI runs: check the receipts of one commit or of a range of the target's history, offline -- failing closed.

A single commit must carry a receipt (``refs/notes/agentops/receipts``) that passes every check of
:func:`git_agentops.receipts.verify.verify_receipt`. A range ``BASE..TIP`` judges **every** commit on the first-parent
chain from TIP down to BASE: a commit is *covered* when it carries a valid receipt or is one of the merge steps
recorded in the valid receipt of a later first-parent commit; any other commit -- a plain ``git commit`` on the
target, an integration whose receipt was removed together with its delivery notes -- is ``RECEIPT_MISSING``,
unless plain commits are allowed (``--allow-plain-commits``, or ``[receipts] plain_commits = "allow"`` in the base's
policy), and then it is listed as not covered (``RECEIPT_NOT_COVERED``, not a failure). A person's policy commit,
SSH-signed by a key the rules in force allow for Git's namespace, is covered (``RECEIPT_POLICY_SIGNED``; unsigned or
signed by another key it fails where plain commits are refused: :mod:`.signed`), and its rules apply from it on. A
commit that an *invalid* receipt of a later commit names as one of its merge steps is not covered either, but it is
not "missing" a receipt:
its verdict carries the invalid receipt's own code (``RECEIPT_SIGNATURE_INVALID`` for an unsigned receipt where a
signature is required, say) and names that receipt, its run and why it does not count (``coveredBy`` in JSON). A
range in which no commit is covered at all fails, an empty one too.

Whose rules: ``--allowed-signers`` pins the signers and implies ``require_signature`` (``allow_unsigned`` for local
use). Without a pin, the signers, ``require_signature`` and ``plain_commits`` come from the policy at the trusted side
-- BASE for a range, the first parent for a single commit -- never from the commit being verified: a commit that
adds a key to ``allowed_signers`` or deletes the policy does not vouch for itself. A change of the policy or of the
signers file inside the range is reported (``RECEIPT_POLICY_CHANGED``); the commits after it are judged by the
rules they had before, unless the changing commit is covered by a receipt valid under those rules (its own, or the
one of the integration it is a step of) -- then the rules at that receipt's commit apply from there on. Reading goes
through git plumbing: no pygit2.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from ..clock import Clock
from ..errors import AgentOpsError
from ..gitstore.backend import GitCliBackend
from ..gitstore.identity import DEFAULT_IDENTITY
from ..gitstore.notes import RECEIPTS_REF, Notes
from .dsse import parse_envelope
from .signed import judge_policy_commit, signer_files
from .verify import Verdict, verify_receipt


@dataclass(frozen=True, slots=True)
class CommitInfo:
    """A commit as ``git log --format='%H %T %P'`` shows it: the id, tree and parents a receipt is checked against."""

    commit: str
    tree: str
    parents: tuple[str, ...]


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise AgentOpsError("OBJECT_MISSING", f"git {' '.join(args[:3])}: {done.stderr.strip()}")
    return done.stdout


def commits(cwd: Path, spec: str) -> list[CommitInfo]:
    """The commit ``spec`` names, or the first-parent walk of a range ``A..B`` (newest first)."""
    if ".." in spec:
        base, _, tip = spec.partition("..")
        out = _git(
            cwd,
            "rev-list",
            "--first-parent",
            "--format=%H %T %P",
            "--no-commit-header",
            f"{tip or 'HEAD'}",
            f"^{base}" if base else "--all",
        )
    else:
        out = _git(cwd, "log", "-1", "--format=%H %T %P", f"{spec}^{{commit}}")
    found = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            found.append(CommitInfo(parts[0], parts[1], tuple(parts[2:])))
    return found


def first_parent_chain(cwd: Path, known: list[str] | None = None) -> Any:
    """``chain(commit, base)``: the first-parent walk from ``commit`` down to (not including) ``base``.

    A range check already has the walk of the whole range; a lookup into it costs nothing, where asking git for
    each receipt would walk the history again every time (quadratic over a long range).
    """
    position = {commit: index for index, commit in enumerate(known or [])}

    def chain(commit: str, base: str) -> list[str]:
        if known is not None and commit in position and base in position and position[base] > position[commit]:
            return known[position[commit] : position[base]]
        count = 64
        while True:
            walk = _git(cwd, "rev-list", "--first-parent", f"--max-count={count}", commit).split()
            if base in walk:
                return walk[: walk.index(base)]
            if len(walk) < count:
                return walk
            count *= 8

    return chain


@dataclass(frozen=True, slots=True)
class Rules:
    """What a receipt is judged by: the allowed signers, whether a signature is required, whether plain commits
    may be on the target, and where these came from (for messages)."""

    signers: Path | None
    required: bool
    plain: bool
    source: str
    paths: tuple[str, ...] = ()  # the files they were read from (the policy and its signers file)


def _blob(cwd: Path, commit: str, path: str) -> bytes | None:
    done = subprocess.run(
        ["git", "cat-file", "blob", f"{commit}:{path}"], cwd=cwd, capture_output=True, timeout=60, check=False
    )
    return done.stdout if done.returncode == 0 else None


def policy_rules(cwd: Path, commit: str | None, scratch: Path) -> Rules:
    """The rules of the policy committed at ``commit`` (none at all: no signers, nothing required, plain refused)."""
    from ..model.policy import POLICY_PATH
    from ..policy.load import policy_from_bytes

    nothing = Rules(None, False, False, f"no policy at {commit[:12]}" if commit else "no trusted base", (POLICY_PATH,))
    data = _blob(cwd, commit, POLICY_PATH) if commit else None
    if data is None or commit is None:
        return nothing
    try:
        policy = policy_from_bytes(data, source=f"{commit[:12]}:{POLICY_PATH}")
    except AgentOpsError:
        return nothing
    receipts = policy.doc["receipts"]
    required = bool(receipts.get("require_signature"))
    plain = receipts.get("plain_commits", "refuse") == "allow"
    source = f"the policy at {commit[:12]}"
    where = receipts.get("allowed_signers")
    if not where:
        return Rules(None, required, plain, source, (POLICY_PATH,))
    signers = _blob(cwd, commit, where)
    if signers is None:
        return Rules(None, required, plain, source, (POLICY_PATH, where))
    path = scratch / f"allowed_signers-{commit[:12]}"
    path.write_bytes(signers)
    return Rules(path, required, plain, source, (POLICY_PATH, where))


def _changed_paths(cwd: Path, spec: str) -> dict[str, set[str]]:
    """Per first-parent commit of ``spec``, the paths it changes against its first parent (merges included)."""
    base, _, tip = spec.partition("..")
    out = subprocess.run(
        [
            "git",
            "log",
            "--first-parent",
            "--diff-merges=first-parent",
            "--no-renames",
            "-z",
            "--name-only",
            "--format=%x01%H",
            tip or "HEAD",
            f"^{base}",
        ],
        cwd=cwd,
        capture_output=True,
        timeout=300,
        check=False,
    )
    if out.returncode != 0:
        raise AgentOpsError("OBJECT_MISSING", f"git log {spec}: {out.stderr.decode(errors='replace').strip()}")
    changed: dict[str, set[str]] = {}
    for record in out.stdout.decode("utf-8", "surrogateescape").split("\x01")[1:]:
        commit, _, names = record.partition("\0")  # "%x01<id>\0\n<name>\0<name>\0..."
        changed[commit.strip()] = {n.strip("\n") for n in names.split("\0") if n.strip("\n")}
    return changed


class _IncomingRefs(GitCliBackend):
    def __init__(self, cwd: Path, *, incoming: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(cwd, **kwargs)
        self.incoming = dict(incoming)

    def read_ref(self, name: str) -> str | None:
        return self.incoming.get(name) or super().read_ref(name)


def check(
    cwd: Path,
    spec: str,
    *,
    environ: Mapping[str, str],
    clock: Clock,
    allowed_signers: Path | None = None,
    require_signature: bool | None = None,
    allow_plain: bool = False,
    require_covered: bool = True,
    incoming: Mapping[str, str] | None = None,
    progress: Callable[[str], None] | None = None,
    require_sandbox: str | None = None,
) -> list[Verdict]:
    """The verdicts of a commit or a range (see the module docstring); the check passes when every verdict is ok.

    ``allowed_signers`` pins the signers (then a signature is required unless ``require_signature`` is False);
    ``require_signature`` otherwise overrides the policy's. ``allow_plain`` accepts commits no receipt covers;
    ``require_covered=False`` lets a range hold no covered commit at all (a push of allowed plain commits onto a
    tip the server already took; CI's range has no such history and keeps the default). ``progress`` hears how
    far a long range got (every 250 commits). ``require_sandbox``: every receipt must show its agents ran at that
    sandbox level or a stronger one (``RECEIPT_SANDBOX_WEAKER``; :func:`.verify.verify_receipt`).
    ``incoming`` gives notes refs their value from a push still being received (``pre-receive``: the objects are
    here, the refs not yet), so receipts pushed together with their commits count.
    """
    backend = _IncomingRefs(cwd, environ=environ, identity=DEFAULT_IDENTITY, clock=clock, incoming=incoming or {})
    receipts = Notes(backend, RECEIPTS_REF)
    walk = commits(cwd, spec)
    single = ".." not in spec
    chain = first_parent_chain(cwd, None if single else [info.commit for info in walk])
    when = datetime.fromtimestamp(clock.now(), tz=UTC)
    with tempfile.TemporaryDirectory(prefix="agentops-receipts-") as tmp:
        scratch = Path(tmp)
        if single:
            base = walk[0].parents[0] if walk and walk[0].parents else None
        else:
            base = _git(cwd, "rev-parse", "--verify", f"{spec.partition('..')[0]}^{{commit}}").strip()
        rules = policy_rules(cwd, base, scratch)
        if allowed_signers is not None:
            required = True if require_signature is None else require_signature
            rules = Rules(allowed_signers, required, rules.plain, f"--allowed-signers {allowed_signers}")
        elif require_signature is not None:
            rules = Rules(rules.signers, require_signature, rules.plain, rules.source, rules.paths)
        plain = allow_plain or rules.plain

        def judge(info: CommitInfo, data: bytes, rules: Rules) -> Verdict:
            return verify_receipt(
                data,
                commit=info.commit,
                tree=info.tree,
                parents=info.parents,
                first_parent_chain=chain,
                allowed_signers=rules.signers,
                require_signature=rules.required,
                when=when,
                require_sandbox=require_sandbox,
            )

        if single:
            info = walk[0]
            data = receipts.read(info.commit)
            if data is None:
                return [Verdict(info.commit, False, "RECEIPT_MISSING", f"{info.commit[:12]} has no receipt")]
            return [judge(info, data, rules)]
        pinned = allowed_signers is not None
        read = receipts.snapshot()  # one look at the notes tree for the whole range
        verdicts, covered = _judge_range(
            cwd, spec, walk, read, rules, plain, judge, scratch, pinned=pinned, progress=progress, when=when
        )
        if require_covered and not covered:
            tip = walk[0].commit if walk else spec.partition("..")[2] or "HEAD"
            invalid = [v for v in verdicts if not v.ok and v.claims and v.covered_by is None]
            but = (
                f" ({len(invalid)} receipt(s) in it do not count: "
                + ", ".join(f"{v.commit[:12]} {v.code}" for v in invalid[:5])
                + ")"
                if invalid
                else ""
            )
            verdicts.append(
                Verdict(tip, False, "RECEIPT_MISSING", f"no commit of {spec} is covered by a valid receipt{but}")
            )
        return verdicts


def _judge_range(
    cwd: Path,
    spec: str,
    walk: list[CommitInfo],
    read: Callable[[str], bytes | None],
    rules: Rules,
    plain: bool,
    judge: Any,
    scratch: Path,
    *,
    pinned: bool,
    progress: Callable[[str], None] | None = None,
    when: datetime | None = None,
) -> tuple[list[Verdict], bool]:
    """Oldest first: each receipt judged by the rules in force (a covered policy change moves them); then newest
    first: coverage by each valid receipt's steps, and a verdict for every commit nothing covers. Also: whether
    any commit is covered."""
    changed = {} if pinned else _changed_paths(cwd, spec)
    judged: dict[str, Verdict] = {}
    pending: dict[str, set[str]] = {}  # policy changes waiting for a receipt that covers them
    for done, info in enumerate(reversed(walk), 1):
        if progress is not None and (done % 250 == 0 or done == len(walk)) and len(walk) >= 250:
            progress(f"receipts: {done}/{len(walk)} commits checked")
        touched = changed.get(info.commit, set()) & set(rules.paths)
        data = read(info.commit)
        if data is not None:
            verdict = judged[info.commit] = judge(info, data, rules)
            steps = {*verdict.covers, info.commit} if verdict.ok else set()
            if (touched and info.commit in steps) or any(commit in steps for commit in pending):
                for commit in [c for c in pending if c in steps]:
                    del pending[commit]
                rules = policy_rules(cwd, info.commit, scratch)  # integrated under the old rules: now in force
                continue
        else:
            signed = judge_policy_commit(
                cwd,
                info.commit,
                info.parents,
                paths=sorted(changed[info.commit]) if info.commit in changed else None,
                signer_files=partial(signer_files, cwd),
                allowed_signers=rules.signers,
                source=rules.source,
                when=when,
            )
            if signed is not None and (signed.ok or not plain):  # where plain commits may land, so may this one
                judged[info.commit] = signed
                if signed.ok:  # a person signed the rules at this commit: they are in force from here on
                    pending.clear()
                    rules = policy_rules(cwd, info.commit, scratch)
                    continue
        if touched:
            pending[info.commit] = touched
    notes = {
        commit: Verdict(
            commit,
            True,
            "RECEIPT_POLICY_CHANGED",
            f"{commit[:12]} changes {', '.join(sorted(touched))} and no receipt valid under the rules before it "
            "covers it: the commits after it are judged by those rules",
        )
        for commit, touched in pending.items()
    }
    verdicts: list[Verdict] = []
    covered: set[str] = set()
    claimed: dict[str, Verdict] = {}  # a commit an invalid receipt names as its merge step -> that receipt's verdict
    any_covered = False
    for info in walk:
        verdict = judged.get(info.commit)
        if verdict is not None:
            verdicts.append(verdict)
            if verdict.ok:
                covered.update(verdict.covers)
                any_covered = True
            else:
                claimed.update((step, verdict) for step in verdict.claims if step not in claimed)
        elif info.commit in covered:
            any_covered = True
        elif info.commit in claimed:
            verdicts.append(_claimed_by_invalid(info.commit, claimed[info.commit]))
        elif plain:
            verdicts.append(
                Verdict(info.commit, True, "RECEIPT_NOT_COVERED", f"{info.commit[:12]} is a plain commit (allowed)")
            )
        else:
            verdicts.append(
                Verdict(
                    info.commit,
                    False,
                    "RECEIPT_MISSING",
                    f"{info.commit[:12]} is on the target but no receipt covers it (a plain commit, or an integration "
                    'whose receipt is gone); --allow-plain-commits or [receipts] plain_commits = "allow" accepts '
                    "plain commits",
                )
            )
        if info.commit in notes:
            verdicts.append(notes[info.commit])
    return verdicts, any_covered


def _claimed_by_invalid(commit: str, receipt: Verdict) -> Verdict:
    """The verdict on a range's commit that only an invalid receipt names as its merge step: the receipt's own code
    (why it does not count), naming that receipt -- not ``RECEIPT_MISSING``, which would send the reader looking for
    a receipt that is there."""
    step = receipt.claims.index(commit) + 1
    run = f" (run {receipt.run_id})" if receipt.run_id else ""
    return Verdict(
        commit,
        False,
        receipt.code,
        f"{commit[:12]} is merge step {step} of {len(receipt.claims)} of the receipt on {receipt.commit[:12]}{run}, "
        f"which does not count: {receipt.message}",
        covered_by=receipt.commit,
    )


def show(cwd: Path, rev: str, *, environ: Mapping[str, str], clock: Clock) -> dict[str, Any]:
    """The receipt of ``rev``: the envelope's signatures and the statement. ``RECEIPT_MISSING``."""
    info = commits(cwd, rev)[0]
    backend = GitCliBackend(cwd, environ=environ, identity=DEFAULT_IDENTITY, clock=clock)
    data = Notes(backend, RECEIPTS_REF).read(info.commit)
    if data is None:
        raise AgentOpsError("RECEIPT_MISSING", f"{info.commit[:12]} has no receipt")
    envelope = parse_envelope(data)
    return {
        "commit": info.commit,
        "payloadType": envelope.payload_type,
        "signatures": [{"keyid": s.keyid} for s in envelope.signatures],
        "statement": envelope.statement(),
    }
