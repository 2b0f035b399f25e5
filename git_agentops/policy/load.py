"""Reading ``.agentops/policy.toml``: TOML, schema, semantic rules, every problem with its code and line.

``check`` collects *every* problem (for ``git agentops-policy check``); ``load`` raises the first one (for
commands that are about to use the policy). Problems are coded by what went wrong, so scripts can tell a typo
(``POLICY_UNKNOWN_KEY``) from a wrong type (``POLICY_WRONG_TYPE``) or an out-of-range value
(``POLICY_VALUE_INVALID``). tomllib reports no positions for values, so lines are found by scanning the TOML
text for the table headers and keys along the error's JSON path -- "where possible": a key written inside an
inline table or an array of inline tables is located at its enclosing key.

A validated policy is cached by the SHA-256 of the file's bytes (and the toolkit version) under
``$GIT_COMMON_DIR/agentops/cache/policy/``: the same bytes always validate the same way, and the cache spares the
hot paths (verify, hooks) the cost of importing tomllib and re-validating.
"""

from __future__ import annotations

import errno
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..canonical import JsonObject, JsonValue, canonical_bytes
from ..errors import AgentOpsError
from ..gitstore.private import read_private, resolve_contained, write_private
from ..gitstore.refnames import ref_name_problem
from ..model.globs import compile_pattern
from ..model.policy import POLICY_PATH, Policy, effective
from ..model.policydoc import PolicyDoc
from ..schema import documents
from .cache import CACHE_DIR, cache_key

MAX_POLICY_BYTES: Final = 256 * 1024
_KEYWORD_CODES: Final = {
    "additionalProperties": "POLICY_UNKNOWN_KEY",
    "type": "POLICY_WRONG_TYPE",
    "required": "POLICY_INVALID",
}
_LOOSE_CODE: Final = "POLICY_VALUE_INVALID"
_STRUCTURE_KEYWORDS: Final = frozenset({"required", "dependentRequired", "anyOf", "oneOf", "allOf", "not", "false"})


@dataclass(frozen=True, slots=True)
class Problem:
    code: str
    json_path: str
    message: str
    line: int | None = None

    def render(self, source: str) -> str:
        where = f"{source}:{self.line}" if self.line else source
        return f"error[{self.code}]: {where}: {self.json_path}: {self.message}"

    def to_json(self, source: str) -> JsonObject:
        return {"code": self.code, "file": source, "line": self.line, "path": self.json_path, "message": self.message}


# -- locating JSON paths in TOML text -----------------------------------------------------------------------------

_HEADER: Final = re.compile(r"\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?")
_KEY_PART: Final = r"(?:\"[^\"]*\"|'[^']*'|[A-Za-z0-9_-]+)"
_KEY: Final = re.compile(rf"\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=")


def _split_key(text: str) -> tuple[str, ...]:
    parts = re.findall(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_-]+)", text)
    return tuple(a or b or c for a, b, c in parts)


@dataclass(frozen=True, slots=True)
class _Section:
    path: tuple[str | int, ...]  # JSON path of the table (array tables include their index)
    line: int
    keys: dict[tuple[str, ...], int]


def _sections(text: str) -> list[_Section]:
    sections = [_Section((), 0, {})]
    array_counts: dict[tuple[str, ...], int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.fullmatch(line)
        if header and not _KEY.match(line):
            names = _split_key(header.group(2))
            if header.group(1) == "[[":
                index = array_counts.get(names, 0)
                array_counts[names] = index + 1
                sections.append(_Section((*names, index), number, {}))
            else:
                # a sub-table of the latest element of an array table, e.g. [verify.commands.env]
                path: tuple[str | int, ...] = names
                for prefix, count in array_counts.items():
                    if names[: len(prefix)] == prefix and len(names) > len(prefix):
                        path = (*prefix, count - 1, *names[len(prefix) :])
                sections.append(_Section(path, number, {}))
            continue
        key = _KEY.match(line)
        if key:
            sections[-1].keys.setdefault(_split_key(key.group(1)), number)
    return sections


def locate(text: str, parts: tuple[str | int, ...]) -> int | None:
    """The line of the TOML text where the value at JSON path ``parts`` is written, if it can be found."""
    best: int | None = None
    best_len = -1
    for section in _sections(text):
        n = len(section.path)
        if section.path != parts[:n] or n < best_len:
            continue
        if n == len(parts):
            best, best_len = section.line or None, n
            continue
        rest = parts[n:]
        for length in range(len(rest), 0, -1):
            key = tuple(str(p) for p in rest[:length])
            if all(isinstance(p, str) for p in rest[:length]) and key in section.keys:
                if n + length > best_len:
                    best, best_len = section.keys[key], n + length
                break
    return best


# -- checking -------------------------------------------------------------------------------------------------------


def _json_path(parts: tuple[str | int, ...]) -> str:
    from ..schema.validator import json_path

    return json_path(parts)


def _dicts(value: JsonValue) -> list[tuple[int, Mapping[str, JsonValue]]]:
    return [(i, v) for i, v in enumerate(value) if isinstance(v, dict)] if isinstance(value, list) else []


def _table(doc: Mapping[str, JsonValue], key: str) -> Mapping[str, JsonValue]:
    value = doc.get(key)
    return value if isinstance(value, dict) else {}


def _host_named(name: str, hosts: Mapping[str, object]) -> bool:
    """``name`` is a host of ``[hosts]`` or a built-in agent (which needs no table). The host kinds are imported
    only for a name ``[hosts]`` lacks: a person's verify reads policies that name none."""
    if name in hosts:
        return True
    from ..model.hosts import builtin_hosts

    return name in {kind.name for kind in builtin_hosts()}


def _semantic(doc: Mapping[str, JsonValue]) -> Iterator[tuple[str, tuple[str | int, ...], str]]:
    """Rules a schema cannot say. Defensive: runs on documents that may also be schema-invalid (the TOML as
    parsed: JSON values, bar dates, which no rule here reads)."""
    verify = _table(doc, "verify")
    commands: list[tuple[tuple[str | int, ...], Mapping[str, JsonValue]]] = []
    for group in ("commands", "runners"):
        seen: dict[str, int] = {}
        for index, command in _dicts(verify.get(group)):
            commands.append((("verify", group, index), command))
            cid = command.get("id")
            if isinstance(cid, str) and cid in seen:
                yield (
                    "POLICY_DUPLICATE_ID",
                    ("verify", group, index, "id"),
                    f"id {cid!r} is already used by verify.{group}[{seen[cid]}]",
                )
            elif isinstance(cid, str):
                seen[cid] = index
    commands += [(("worktree", "setup", i), s) for i, s in _dicts(_table(doc, "worktree").get("setup"))]
    hosts = _table(doc, "hosts")
    commands += [(("hosts", name), h) for name, h in hosts.items() if isinstance(h, dict)]
    for base, command in commands:
        argv, shell = command.get("argv"), command.get("shell", False)
        if isinstance(argv, str) and shell is not True:
            yield (
                "POLICY_SHELL_REQUIRED",
                (*base, "argv"),
                "argv is a single string, which only a shell can split: write a list, or say shell = true",
            )
        if isinstance(argv, list) and shell is True:
            yield (_LOOSE_CODE, (*base, "argv"), "with shell = true, argv is one string for /bin/sh -c")
    for name, host in hosts.items():
        if isinstance(host, dict) and host.get("kind") == "command" and "argv" not in host:
            yield ("POLICY_INVALID", ("hosts", name), "a host of kind 'command' needs argv")
    yield from shell_host_problems(hosts)
    yield from _workspace_problems(doc, hosts)
    run = _table(doc, "run")
    target = run.get("target")
    if isinstance(target, str) and (problem := ref_name_problem(f"refs/heads/{target}")):
        yield (_LOOSE_CODE, ("run", "target"), f"{target!r} is not a valid branch name: {problem}")
    default_host = run.get("default_host")
    if isinstance(default_host, str) and not _host_named(default_host, hosts):
        yield (_LOOSE_CODE, ("run", "default_host"), f"no host named {default_host!r} (define [hosts.{default_host}])")
    review = _table(doc, "review")
    listed = review.get("reviewers")
    reviewers: list[JsonValue] = listed if isinstance(listed, list) else []
    for index, reviewer in enumerate(reviewers):
        if isinstance(reviewer, str) and not _host_named(reviewer, hosts):
            yield (_LOOSE_CODE, ("review", "reviewers", index), f"no host named {reviewer!r}")
    required = review.get("required")
    if isinstance(required, int) and not isinstance(required, bool) and required > len(reviewers):
        yield (_LOOSE_CODE, ("review", "required"), f"{required} reviews required but {len(reviewers)} reviewers named")
    people = review.get("people")
    if isinstance(people, int) and people > 0 and _table(doc, "queue").get("enabled") is True:
        yield (
            _LOOSE_CODE,
            ("review", "people"),
            "approvals by people are asked before a direct publish; the merge queue does not wait for them: "
            "use one or the other",
        )
    patterns = _table(doc, "guardrails").get("deny_patterns")
    for index, pattern in enumerate(patterns if isinstance(patterns, list) else []):
        if isinstance(pattern, str):
            try:
                re.compile(pattern)
            except re.error as exc:
                yield (_LOOSE_CODE, ("guardrails", "deny_patterns", index), f"not a regular expression: {exc}")
    protected = _table(doc, "guardrails").get("protected_paths")
    for index, pattern in enumerate(protected if isinstance(protected, list) else []):
        if isinstance(pattern, str):
            try:
                compile_pattern(pattern)
            except ValueError as exc:
                yield (_LOOSE_CODE, ("guardrails", "protected_paths", index), f"not a path pattern: {exc}")


_PORT_INDEX: Final = re.compile(r"\{port:([0-9]+)\}")


def _workspace_problems(
    doc: Mapping[str, JsonValue], hosts: Mapping[str, JsonValue]
) -> Iterator[tuple[str, tuple[str | int, ...], str]]:
    """``[worktree]``'s ports and services: every ``{port:K}`` within the block, service names unique, and no
    service for a host that has no network of its own to reach it by (:mod:`git_agentops.workspace.ports`)."""
    worktree = _table(doc, "worktree")
    count = worktree.get("ports", 0)
    ports = count if isinstance(count, int) and not isinstance(count, bool) else 0
    argvs: list[tuple[tuple[str | int, ...], JsonValue]] = []
    for group in ("commands", "runners"):
        argvs += [(("verify", group, i, "argv"), c.get("argv")) for i, c in _dicts(_table(doc, "verify").get(group))]
    argvs += [(("worktree", "setup", i, "argv"), s.get("argv")) for i, s in _dicts(worktree.get("setup"))]
    seen: dict[str, int] = {}
    for index, service in _dicts(worktree.get("services")):
        for key in ("init", "start", "ready", "stop", "attach", "detach"):
            argvs.append((("worktree", "services", index, key), service.get(key)))
        name = service.get("name")
        if isinstance(name, str) and name in seen:
            yield ("POLICY_DUPLICATE_ID", ("worktree", "services", index, "name"), f"service {name!r} is named twice")
        elif isinstance(name, str):
            seen[name] = index
    for where, argv in argvs:
        parts = (
            [argv]
            if isinstance(argv, str)
            else [a for a in argv if isinstance(a, str)]
            if isinstance(argv, list)
            else []
        )
        for part in parts:
            for match in _PORT_INDEX.finditer(part):
                if int(match.group(1)) >= ports:
                    yield (
                        _LOOSE_CODE,
                        where,
                        f"{match.group(0)} but [worktree] ports = {ports}: a block holds {{port:0}} to "
                        f"{{port:{max(ports - 1, 0)}}}",
                    )
    if seen:
        for name, host in hosts.items():
            if isinstance(host, dict) and host.get("network") is False:
                yield (
                    _LOOSE_CODE,
                    ("hosts", name, "network"),
                    "an agent without the network runs in a network namespace of its own, where the workspace's "
                    "services cannot be reached: give it the network, or take [[worktree.services]] out",
                )


# Placeholders whose values are free text (a prompt holds whatever a person or a coordinator wrote), as opposed to
# paths and ids, which the launcher shell-quotes into a shell string (:mod:`git_agentops.hosts.launch`).
_FREE_TEXT: Final = ("prompt",)
_PLACEHOLDER: Final = re.compile(r"\{([a-z_]+)\}")


def shell_host_problems(hosts: Mapping[str, JsonValue]) -> Iterator[tuple[str, tuple[str | int, ...], str]]:
    """What is wrong with the shell strings of ``shell = true`` hosts (and any string ``resume_argv``).

    A shell string is parsed by ``/bin/sh``: a ``{prompt}`` in it would run the ``$(...)`` and backticks of a task
    title the coordinator chose, so it is refused; the file or the environment carries the prompt instead. Every
    other placeholder is substituted shell-quoted, so one written inside quotes (``"{worktree}"``) would keep the
    quotes as literal characters: refused too, with what to write instead. Defensive, like :func:`_semantic`:
    checks only values of the right types.
    """
    for name, host in hosts.items():
        if not isinstance(host, dict):
            continue
        resume = host.get("resume_argv")
        if isinstance(resume, str) and host.get("shell") is not True:
            yield (
                "POLICY_SHELL_REQUIRED",
                ("hosts", name, "resume_argv"),
                "resume_argv is a single string, which only a shell can split: write a list, or say shell = true",
            )
        for key in ("argv", "resume_argv"):
            value = host.get(key)
            if not isinstance(value, str) or host.get("shell") is not True:
                continue
            where = ("hosts", name, key)
            for placeholder in _PLACEHOLDER.finditer(value):
                if placeholder.group(1) in _FREE_TEXT:
                    yield (
                        _LOOSE_CODE,
                        where,
                        f"{{{placeholder.group(1)}}} puts free text into a shell string, where $(...) and backticks "
                        "in it would run: pass the file, {prompt_file}, or read $AGENTOPS_PROMPT (its path) instead",
                    )
                elif _quoted_at(value, placeholder.start()):
                    yield (
                        _LOOSE_CODE,
                        where,
                        f"{placeholder.group()} is inside quotes; the value is shell-quoted for you, so write it "
                        f"bare ({placeholder.group()}, or --flag={placeholder.group()})",
                    )


def _quoted_at(text: str, position: int) -> bool:
    """Whether ``position`` of a shell string is inside single or double quotes (or escaped by a backslash)."""
    quote: str | None = None
    index = 0
    while index < position:
        char = text[index]
        if quote == "'":
            quote = None if char == "'" else quote
        elif char == "\\":
            index += 1
            if index >= position:
                return True
        elif quote == '"':
            quote = None if char == '"' else quote
        elif char in "'\"":
            quote = char
        index += 1
    return quote is not None


def check_text(text: str) -> tuple[PolicyDoc | None, list[Problem]]:
    """Every problem of a policy text, and its effective document when there are none."""
    import tomllib

    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        found = re.search(r"at line (\d+)", str(exc))
        return None, [Problem("POLICY_TOML_INVALID", "$", str(exc), int(found.group(1)) if found else None)]
    problems = []
    for error in documents.schema_errors(raw, "policy"):
        if error.keyword in _STRUCTURE_KEYWORDS - {"required"}:
            code = "POLICY_INVALID"
        else:
            code = _KEYWORD_CODES.get(error.keyword, _LOOSE_CODE)
        problems.append(Problem(code, error.json_path, error.message, locate(text, error.path)))
    schema_paths = {p.json_path for p in problems}
    for code, parts, message in _semantic(raw):
        if _json_path(parts) not in schema_paths:
            problems.append(Problem(code, _json_path(parts), message, locate(text, parts)))
    problems.sort(key=lambda p: (p.line or 0, p.json_path))
    if problems:
        return None, problems
    return effective(raw), []


def read_policy_bytes(worktree: Path, rel: str = POLICY_PATH) -> bytes:
    """The worktree's policy file's bytes: ``PATH_ESCAPE`` (a symlink out), else as :func:`read_policy_file`."""
    return read_policy_file(resolve_contained(worktree, rel), worktree / rel)


def read_policy_file(path: Path, shown: Path | str) -> bytes:
    """A policy file's bytes, within :data:`MAX_POLICY_BYTES`: ``POLICY_MISSING``, ``PATH_NOT_REGULAR`` (a FIFO an
    agent put there must not block a reader, nor a device fill memory), ``DOC_TOO_LARGE``."""
    from ..files import read_bounded

    try:
        data = read_bounded(path, MAX_POLICY_BYTES)
    except FileNotFoundError:
        raise AgentOpsError(
            "POLICY_MISSING", f"no policy at {shown}; 'git agentops-init' writes a starter policy"
        ) from None
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            raise AgentOpsError("PATH_NOT_REGULAR", f"{shown} is {exc.strerror}") from None
        raise AgentOpsError("POLICY_MISSING", f"cannot read {shown}: {exc.strerror or exc}") from None
    if len(data) > MAX_POLICY_BYTES:  # what was read of it is not the policy: say so, never check a part
        raise AgentOpsError("DOC_TOO_LARGE", f"{shown} is over {MAX_POLICY_BYTES} bytes")
    return data


def policy_from_bytes(data: bytes, *, source: str = POLICY_PATH, cache_dir: Path | None = None) -> Policy:
    """Validate policy bytes (or find them in the cache) and return the policy; raises the first problem."""
    key = cache_key(data)
    if cache_dir is not None:
        try:
            cached = read_private(cache_dir, f"{key}.json", max_bytes=4 * MAX_POLICY_BYTES)
        except AgentOpsError:
            cached = None
        if cached is not None:
            try:
                doc = json.loads(cached)
                # an entry validated before a rule was added (the key is bytes and version) must not bypass it
                if not any(shell_host_problems(doc.get("hosts") or {})):
                    return Policy.from_effective(doc, source)
            except (ValueError, AttributeError, AgentOpsError):
                pass  # a damaged cache entry is simply recomputed
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AgentOpsError("POLICY_TOML_INVALID", f"{source} is not UTF-8: {exc.reason}") from exc
    doc, problems = check_text(text)
    if problems or doc is None:
        first = problems[0]
        where = f"{source}:{first.line}" if first.line else source
        raise AgentOpsError(
            first.code,
            f"{where}: {first.json_path}: {first.message} ('git agentops-policy check' lists all)",
            details={"problems": [p.to_json(source) for p in problems]},
        )
    policy = Policy.from_effective(doc, source)
    if cache_dir is not None:
        try:
            write_private(cache_dir, f"{key}.json", canonical_bytes(doc))
        except (OSError, AgentOpsError):
            pass  # the cache is an optimisation; failing to write it changes nothing
    return policy


def load_policy(worktree: Path, *, cache_dir: Path | None = None, rel: str = POLICY_PATH) -> Policy:
    """The policy of the checkout at ``worktree``."""
    return policy_from_bytes(read_policy_bytes(worktree, rel), source=rel, cache_dir=cache_dir)


def cache_dir_for(common_dir: Path) -> Path:
    return common_dir.joinpath(*CACHE_DIR)


def render_toml(doc: Mapping[str, JsonValue]) -> str:
    """A policy document as TOML text (used by ``init``)."""
    import tomli_w

    return tomli_w.dumps(dict(doc), multiline_strings=False)
