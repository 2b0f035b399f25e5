"""The agent guard: refuse an agent's destructive or secret-leaking shell command before its host runs it.

Each worker worktree gets its host's own pre-tool hook (:func:`install_agent_guard`; the hosts' contracts and
their sources are in :mod:`.hostconfig`), which pipes the tool call's JSON into ``git agentops-hook
agent-command``. This module decides: every simple command of the line (:mod:`.shell` finds them, through
``&&``/``;``/``|`` chains, ``$(...)``, subshells, ``sudo``/``env``/``command``/``xargs``/``sh -c``/``eval``
wrappers) is checked against the rules below, and the whole line against the secret rules of
:mod:`git_agentops.verify.redact`. A refusal is one line on stderr and exit status 2 -- what Claude Code, Codex,
Gemini CLI and our opencode plugin all read as "blocked, and here is why" -- so the agent learns what to do
instead. (aider has no hook: :mod:`git_agentops.model.hosts.aider`.)

Refused, and why:

* a recursive delete (``rm -r``/``-rf``/``--recursive``, ``find ... -delete`` or ``-exec rm`` without a name
  test) of ``/``, a top-level directory, ``~``/``$HOME``, ``.``/``..``, the worktree root or any directory above
  it, or ``*``/``.*`` at the top of one of those; ``$VAR`` other than ``$HOME`` counts as empty (``rm -rf
  "$DIR/"`` is ``rm -rf /`` when ``DIR`` is unset; ``${DIR:?}`` guards it);
* ``git reset --hard`` (discards uncommitted work) and ``git clean -f`` (deletes untracked files -- new work not
  yet added, and with ``-x`` the mailbox and this guard's own configuration);
* ``git push`` with ``--force``/``-f``/``--force-with-lease``/``--force-if-includes``/``--mirror``/``--prune``,
  a ``+refspec``, ``--no-verify``, or a delete (``--delete``, ``:ref``) of an agentops ref;
* ``git update-ref``/``symbolic-ref`` on ``refs/agentops/*`` or ``refs/notes/agentops/*``, and ``git notes``
  writes to ``refs/notes/agentops/*``: run state and receipts belong to the supervisor;
* ``git config`` writes (anything but ``--get*``, ``--list``/``-l``, ``get``, ``list`` or ``git config NAME``),
  and ``git -c core.hooksPath=...``/``core.fsmonitor=...`` (also via ``--config-env`` or ``GIT_CONFIG_*``);
* ``--no-verify`` (``commit -n`` too) on ``commit``, ``merge``, ``am``, ``rebase`` and ``push``: it skips the
  repository hooks that enforce the run's rules;
* ``git agentops-policy trust``: trust is granted only by a person;
* a command line that holds a literal secret (the rule is named, never the value), and one that cannot be
  parsed (``cannot parse``): a command the guard cannot read is not one it lets through.

This is defence in depth, not the wall: a determined agent can write a script and run it, and the kernel
sandbox is what bounds that. It costs one Python start per command, so it imports nothing beyond :mod:`os`,
:mod:`json` and :mod:`.shell` unless the line looks secret-shaped (no pygit2, no :mod:`typing` at run time).
"""

from __future__ import annotations

import os

from .shell import ShellSyntaxError, simple_commands, skip_options, unwrap

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

HOSTS = ("claude", "codex", "opencode", "gemini", "aider")
SHELL_TOOLS = frozenset(
    {"Bash", "bash", "shell", "exec_command", "local_shell", "container.exec", "run_shell_command", "ShellTool"}
)
AGENTOPS_REFS = ("refs/agentops/", "refs/notes/agentops")
NO_VERIFY_SUBCOMMANDS = frozenset({"commit", "merge", "am", "rebase", "push"})
MAX_INPUT = 1024 * 1024


class Context:
    """Where the command runs: its working directory (followed through ``cd``), the worktree root, HOME."""

    __slots__ = ("cwd", "home", "root", "text")

    def __init__(self, cwd: str, root: str | None, home: str | None, text: str) -> None:
        self.cwd = os.path.normpath(cwd)
        self.root = root
        self.home = os.path.normpath(home) if home else None
        self.text = text  # the whole command line

    def resolve(self, target: str) -> tuple[str, str]:
        """``target`` as an absolute path (``~``/``$HOME`` expanded, other variables dropped; ``""`` when nothing
        is left) and a note naming the variables assumed empty."""
        dropped: list[str] = []
        out: list[str] = []
        i = 0
        while i < len(target):
            ch = target[i]
            if ch != "$" or i + 1 >= len(target):
                out.append(ch)
                i += 1
                continue
            if target[i + 1] == "{":
                end = target.find("}", i)
                end = len(target) - 1 if end < 0 else end
                body = target[i + 2 : end]
                name = body.split(":", 1)[0]
                i = end + 1
            else:
                j = i + 1
                while j < len(target) and (target[j].isalnum() or target[j] == "_"):
                    j += 1
                body = name = target[i + 1 : j]
                i = max(j, i + 1)
            if name == "HOME" and body == "HOME" and self.home:
                out.append(self.home)
            elif ":?" in body or body.startswith(("?", "#")):
                out.append("_guarded_")  # ${X:?} fails when X is unset: not empty
            else:
                dropped.append(f"${name}")
        path = "".join(out)
        if path == "~" or path.startswith("~/"):
            path = (self.home or "/home") + path[1:]
        elif path.startswith("~"):
            path = "/home/" + path[1:]  # ~user: some home directory
        note = f" if {', '.join(dropped)} {'is' if len(dropped) == 1 else 'are'} empty" if dropped else ""
        return (os.path.normpath(os.path.join(self.cwd, path)) if path else ""), note

    def protected(self, target: str) -> str | None:
        """Why a recursive delete of ``target`` is refused, or None."""
        path, note = self.resolve(target)
        if not path:
            return None  # rm -rf "" removes nothing
        head, tail = os.path.split(path)
        glob = _everything(tail)
        what = self._what(head if glob else path)
        if what is None:
            return None
        return f"{'everything in ' if glob else ''}{what}{note}"

    def _what(self, path: str) -> str | None:
        places = ((self.root, "the worktree"), (self.home, "your home directory"), (self.cwd, "the current directory"))
        for place, name in places:
            if place and path == place:
                return name
            if place and place.startswith(path.rstrip("/") + "/"):
                return "the filesystem root" if path == "/" else f"{path}, a directory above {name}"
        if path == "/":
            return "the filesystem root"
        if path.count("/") == 1:
            return f"the top-level directory {path}"
        return None


def _everything(name: str) -> bool:
    """A last path component that matches every name (``*``, ``.*``, ``*.*``, ``**``)."""
    return "*" in name and not name.strip("*.?")


def _prefix(arg: str, options: Sequence[str], shortest: int) -> bool:
    """Whether ``arg`` (its ``--name``) abbreviates one of ``options``: git accepts unique prefixes."""
    name = arg.split("=", 1)[0]
    return len(name) >= shortest and any(option.startswith(name) for option in options)


# -- the rules -------------------------------------------------------------------------------------------------


def _rm(args: Sequence[str], ctx: Context) -> str | None:
    recursive = False
    operands: list[str] = []
    options = True
    for arg in args:
        if options and arg == "--":
            options = False
        elif options and arg.startswith("--"):
            recursive = recursive or _prefix(arg, ("--recursive",), 5)
        elif options and arg.startswith("-") and len(arg) > 1:
            recursive = recursive or "r" in arg or "R" in arg
        else:
            operands.append(arg)
    if not recursive:
        return None
    for operand in operands:
        what = ctx.protected(operand)
        if what is not None:
            return f"`rm -r {operand}` deletes {what}; name the files or build directories to delete instead"
    return None


_NAME_TESTS = frozenset({"-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex"})


def _find(args: Sequence[str], ctx: Context) -> str | None:
    rest = skip_options(args, "DO")
    paths: list[str] = []
    while rest and not rest[0].startswith("-") and rest[0] not in ("(", "!", ")", ","):
        paths.append(rest.pop(0))
    deletes = "-delete" in rest or any(
        a in ("-exec", "-execdir", "-ok", "-okdir") and i + 1 < len(rest) and rest[i + 1].endswith(("rm", "unlink"))
        for i, a in enumerate(rest)
    )
    narrowed = "-empty" in rest or any(
        a in _NAME_TESTS and i + 1 < len(rest) and not _everything(rest[i + 1]) for i, a in enumerate(rest)
    )
    if not deletes or narrowed:
        return None
    for path in paths or ["."]:
        what = ctx.protected(path)
        if what is not None:
            return f"`find {path} ...` deleting what it finds deletes {what}; add a -name/-path test for what you mean"
    return None


def _agentops_ref(name: str, *, branches: bool = False) -> bool:
    name = name.lstrip("+")
    return any(ns in name for ns in AGENTOPS_REFS) or (
        branches and (name.startswith("agentops/") or "refs/heads/agentops/" in name)
    )


def _push(args: Sequence[str]) -> str | None:
    positional: list[str] = []
    delete = False
    values = ("--repo", "--receive-pack", "--exec", "--push-option")
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            positional += args[i:]
            break
        if arg.startswith("--"):
            if _prefix(arg, ("--force", "--force-with-lease", "--force-if-includes"), 5):
                return "`git push --force` rewrites history others rely on; push a new branch instead"
            if _prefix(arg, ("--mirror", "--prune"), 5):
                return f"`git push {arg}` can delete or rewrite every ref of the remote, agentops state included"
            if _prefix(arg, ("--no-verify",), 8):
                return "`git push --no-verify` skips the pre-push hook that guards receipts and agentops refs"
            delete = delete or _prefix(arg, ("--delete",), 5)
            i += "=" not in arg and arg in values
        elif arg.startswith("-") and len(arg) > 1:
            for position, ch in enumerate(arg[1:], 1):
                if ch == "f":
                    return "`git push -f` rewrites history others rely on; push a new branch instead"
                delete = delete or ch == "d"
                if ch == "o":
                    i += position == len(arg) - 1
                    break
        else:
            positional.append(arg)
    for refspec in positional[1:]:
        if refspec.startswith("+"):
            return f"the forced refspec `{refspec}` rewrites history others rely on; drop the '+'"
        if (delete or refspec.startswith(":")) and _agentops_ref(refspec.lstrip(":"), branches=True):
            return f"`git push` would delete `{refspec.lstrip(':')}`: agentops refs are the supervisor's record"
    return None


def _notes(args: Sequence[str], assignments: Sequence[str]) -> str | None:
    ref = next((a.split("=", 1)[1] for a in assignments if a.startswith("GIT_NOTES_REF=")), None)
    sub = "list"
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--ref" and i + 1 < len(args):
            ref = args[i + 1]
            i += 1
        elif arg.startswith("--ref="):
            ref = arg[len("--ref=") :]
        elif not arg.startswith("-"):
            sub = arg
            break
        i += 1
    if ref is not None and not ref.startswith("refs/notes/"):
        ref = "refs/notes/" + ref
    if (
        ref
        and ref.startswith("refs/notes/agentops")
        and sub in ("add", "append", "copy", "edit", "merge", "remove", "prune")
    ):
        return f"`git notes {sub}` on {ref}: agentops notes (receipts, evidence) are written only by the supervisor"
    return None


_CONFIG_WRITES = frozenset({"--add", "--unset", "--unset-all", "--replace-all", "--rename-section", "--remove-section"})
_CONFIG_READS = frozenset({"--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color", "--get-colorbool"})


def _config(args: Sequence[str]) -> str | None:
    positional: list[str] = []
    write = read = False
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg in _CONFIG_WRITES or arg in ("-e", "--edit"):
            write = True
        elif arg in _CONFIG_READS or arg in ("-l", "--list"):
            read = True
        elif arg in ("-f", "--file", "--blob", "--type", "--default", "--comment", "--value"):
            i += 1
        elif not arg.startswith("-"):
            positional.append(arg)
    if not write and (read or positional[:1] in (["get"], ["list"]) or len(positional) < 2):
        return None
    return (
        "`git config` writes change how git runs for the whole repository (a linked worktree shares its config), "
        "and settings such as hooks, aliases and filters run programs; use -c NAME=VALUE for one command instead"
    )


def _no_verify(sub: str, args: Sequence[str]) -> str | None:
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if arg.startswith("--"):
            if _prefix(arg, ("--no-verify",), 8):
                return f"`git {sub} --no-verify` skips the repository hooks that enforce the run's rules"
        elif sub == "commit" and arg.startswith("-") and len(arg) > 1:
            for position, ch in enumerate(arg[1:], 1):
                if ch == "n":
                    return "`git commit -n` (--no-verify) skips the repository hooks that enforce the run's rules"
                if ch in "CcFmtuS":
                    i += position == len(arg) - 1 and ch in "CcFmt"  # its value is the next argument
                    break
    return None


def _git(args: Sequence[str], assignments: Sequence[str], ctx: Context) -> str | None:
    configs: list[str] = []
    i = 0
    while i < len(args) and args[i].startswith("-"):
        arg = args[i]
        i += 1
        if arg in ("-c", "--config-env") and i < len(args):
            configs.append(args[i])
            i += 1
        elif arg.startswith("--config-env="):
            configs.append(arg.split("=", 1)[1])
        elif arg in ("-C", "--git-dir", "--work-tree", "--namespace", "--super-prefix", "--list-cmds"):
            i += 1
    overrides = [c.split("=", 1)[0].lower() for c in configs]
    overrides += [a.lower() for a in assignments if a.startswith("GIT_CONFIG")]
    if any(key in override for override in overrides for key in ("core.hookspath", "core.fsmonitor")):
        return "overriding core.hooksPath or core.fsmonitor replaces the repository hooks that enforce the run's rules"
    if i >= len(args):
        return None
    return _git_subcommand(args[i], list(args[i + 1 :]), assignments, ctx)


def _git_subcommand(sub: str, rest: list[str], assignments: Sequence[str], ctx: Context) -> str | None:
    if sub == "reset" and any(_prefix(a, ("--hard",), 5) for a in rest):
        return (
            "`git reset --hard` discards uncommitted work and can move your branch away from your commits; "
            "use `git restore <path>` for files you mean to discard"
        )
    if sub == "clean":
        flags = "".join(a[1:] for a in rest if a.startswith("-") and not a.startswith("--"))
        force = "f" in flags or any(_prefix(a, ("--force",), 5) for a in rest)
        if force and "n" not in flags and not any(_prefix(a, ("--dry-run",), 4) for a in rest):
            return (
                "`git clean -f` deletes untracked files: new work not yet added and, with -x, the mailbox and this "
                "guard's configuration; delete the files you mean by name (or run `git clean -n` to see them)"
            )
    if sub == "push":
        return _push(rest)
    if sub in ("update-ref", "symbolic-ref") and (
        any(_agentops_ref(a) for a in rest) or ("--stdin" in rest and any(ns in ctx.text for ns in AGENTOPS_REFS))
    ):
        return f"`git {sub}` on agentops refs: run state and receipts are written only by the supervisor"
    if sub == "notes":
        return _notes(rest, assignments)
    if sub == "config":
        return _config(rest)
    if sub in NO_VERIFY_SUBCOMMANDS:
        return _no_verify(sub, rest)
    if sub == "agentops-policy" and "trust" in rest:
        return "`git agentops-policy trust`: trust in a policy is granted only by a person, outside the run"
    return None


def _check(argv: list[str], assignments: list[str], ctx: Context) -> str | None:
    name = argv[0].rsplit("/", 1)[-1]
    if name == "rm":
        return _rm(argv[1:], ctx)
    if name == "find":
        return _find(argv[1:], ctx)
    if name == "git":
        return _git(argv[1:], assignments, ctx)
    if name.startswith("git-"):
        return _git_subcommand(name[4:], argv[1:], assignments, ctx)
    if name == "cd" and len(argv) > 1 and argv[1] != "-":
        ctx.cwd = ctx.resolve(argv[1])[0]
    return None


def refusals(
    command: str, *, cwd: str, root: str | None, home: str | None, secrets: Sequence[str] | None = ()
) -> list[str]:
    """Why ``command`` (a shell line run in ``cwd`` of the worktree at ``root``) is refused; empty when allowed.

    ``secrets`` are the policy's extra secret patterns (None: secret scanning is off)."""
    reasons: list[str] = []
    if secrets is not None and _might_hold_secret(command, secrets):
        from ..verify.redact import find_secrets

        rules = sorted({finding.rule for finding in find_secrets(command, secrets)})
        if rules:
            reasons.append(
                f"the command holds a literal secret ({', '.join(rules)}); never put credentials in a command "
                "line (it is logged and kept in the session); remove it and have it rotated if it was real"
            )
    try:
        commands = [c for argv in simple_commands(command) for c in unwrap(argv)]
    except ShellSyntaxError as exc:
        return [*reasons, f"cannot parse it as a shell command line ({exc}); split it into simpler commands"]
    ctx = Context(cwd, root, home, command)
    for assignments, argv in commands:
        reason = _check(argv, assignments, ctx)
        if reason is not None and reason not in reasons:
            reasons.append(reason)
    return reasons


def _might_hold_secret(text: str, patterns: Sequence[str]) -> bool:
    from .fast import might_hold_secret

    return bool(patterns) or might_hold_secret(text.encode("utf-8", "surrogateescape"))


# -- the hook entry --------------------------------------------------------------------------------------------


def command_of(doc: object) -> tuple[str | None, str | None]:
    """(command line, cwd) from a host's tool-call JSON: Claude Code's and Codex's ``PreToolUse`` shape
    (``tool_name``, ``tool_input.command``, ``cwd``), Gemini CLI's ``BeforeTool`` one (``tool_name``
    ``run_shell_command``, ``tool_input.command`` run in ``tool_input.dir_path`` below ``cwd`` when given) or the
    generic ``{"command": ..., "cwd": ...}`` our opencode plugin sends. The command is None for a tool call that
    runs no shell command (nothing to check)."""
    if not isinstance(doc, dict):
        return None, None
    cwd = doc.get("cwd") if isinstance(doc.get("cwd"), str) else None
    tool = doc.get("tool_name", doc.get("tool"))
    if tool is not None and tool not in SHELL_TOOLS:
        return None, cwd
    tool_input = doc.get("tool_input")
    if isinstance(tool_input, dict) and isinstance(tool_input.get("dir_path"), str) and tool_input["dir_path"]:
        cwd = os.path.join(cwd or "", tool_input["dir_path"])  # Gemini resolves it against the project root
    raw = tool_input.get("command") if isinstance(tool_input, dict) else doc.get("command")
    if isinstance(raw, list) and all(isinstance(part, str) for part in raw):
        if len(raw) == 3 and raw[0].rsplit("/", 1)[-1] in ("sh", "bash", "zsh") and raw[1] in ("-c", "-lc"):
            return raw[2], cwd  # Codex's shell tool: ["bash", "-lc", SCRIPT]
        import shlex

        return shlex.join(raw), cwd
    return (raw if isinstance(raw, str) else None), cwd


def toplevel(cwd: str) -> str | None:
    """The top of the checkout holding ``cwd`` (the nearest directory with a ``.git``), or None."""
    path = os.path.abspath(cwd)
    while True:
        if os.path.exists(os.path.join(path, ".git")):
            return path
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent


def agent_command(args: Sequence[str], *, stdin: bytes, cwd: str, env: Mapping[str, str]) -> tuple[int, list[str]]:
    """``git agentops-hook agent-command [--host claude|codex|opencode|gemini|aider]``: (exit status, stderr lines).

    0 allows the tool call; 2 refuses it with one line saying why and what to do instead (also for input that is
    not JSON: a host whose contract changed must not slip through unchecked)."""
    host = None
    for i, arg in enumerate(args):
        if arg.startswith("--host="):
            host = arg.split("=", 1)[1]
        elif arg == "--host" and i + 1 < len(args):
            host = args[i + 1]
        elif args[i - 1 : i] != ["--host"]:
            return 2, [f"git-agentops agent-command: unknown argument {arg!r} (usage: agent-command [--host HOST])"]
    if host is not None and host not in HOSTS:
        return 2, [f"git-agentops agent-command: unknown host {host!r} ({', '.join(HOSTS)})"]
    import json

    try:
        doc = json.loads(stdin[: MAX_INPUT + 1]) if len(stdin) <= MAX_INPUT else None
    except ValueError:
        doc = None
    if doc is None:
        return 2, ["git-agentops refused this tool call: cannot parse the hook input (not a JSON object)"]
    command, where = command_of(doc)
    if command is None:
        return 0, []
    where = os.path.normpath(os.path.join(cwd, where)) if where else cwd  # a relative one: below the hook's cwd
    root = toplevel(where)
    secrets: Sequence[str] | None = ()
    if root is not None:
        from .fast import guardrails
        from .where import locate

        scan, patterns = guardrails(locate(root, {k: v for k, v in env.items() if not k.startswith("GIT_")}))
        secrets = patterns if scan else None
    reasons = refusals(command, cwd=where, root=root, home=env.get("HOME"), secrets=secrets)
    if not reasons:
        return 0, []
    return 2, ["git-agentops refused this command: " + "; ".join(reasons)]


def install_agent_guard(worktree: Path, kind: str, *, hook_command: str) -> list[Path]:
    """Write the host ``kind``'s own hook configuration into ``worktree`` so that every shell command the agent
    issues is first checked by ``HOOK_COMMAND agent-command --host KIND``; the files written are returned. Nothing
    counts as tracked here: the supervisor passes what the project tracks (:mod:`.hostconfig`)."""
    from .hostconfig import write_guard

    return list(write_guard(worktree, kind, hook_command=hook_command).written)
