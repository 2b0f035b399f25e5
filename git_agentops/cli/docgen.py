"""Generate the documentation that must match the code: man pages, shell completions, README's code tables.

``git agentops-run --help`` is turned by git into ``git help agentops-run``, which opens a man page; so every
command ships ``man/man1/git-agentops-<name>.1``, rendered from the same argparse parser that ``-h`` prints.
The README's error-code table is rendered from :data:`git_agentops.errors.CODES`, its event-kind table from
:data:`git_agentops.eventkinds.EVENTS`, its architecture table from :data:`git_agentops.layers.LAYERS` and the
packages' docstrings.

    python -m git_agentops.cli.docgen           # rewrite man/, completions/ and the README tables
    python -m git_agentops.cli.docgen --check   # exit 1 if either is out of date (a test runs this)
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from .. import __version__
from ..errors import CODES
from ..eventkinds import EVENTS
from ..layers import FEATURES, LAYERS
from .completion import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
BEGIN, END = "<!-- error-codes:begin -->", "<!-- error-codes:end -->"
EVENTS_BEGIN, EVENTS_END = "<!-- event-kinds:begin -->", "<!-- event-kinds:end -->"
LAYERS_BEGIN, LAYERS_END = "<!-- architecture:begin -->", "<!-- architecture:end -->"


def _roff_escape(text: str) -> str:
    out = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(("\\&" + line) if line.startswith((".", "'")) else line for line in out.splitlines())


def _all_help(parser: argparse.ArgumentParser) -> str:
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal width; pages must not depend on it
    try:
        text = parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    text += f"\n\n{parser.prog} {name}\n" + sub.format_help()
    finally:  # run in a test's process, it must not leave every later terminal 100 columns wide
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    return text


def man_page(name: str) -> str:
    module = importlib.import_module(f"git_agentops.cli.{name}")
    parser: argparse.ArgumentParser = module.build_parser()
    prog = f"git-agentops-{name}"
    summary = (parser.description or "").strip().splitlines()[0].rstrip(".")
    return (
        f'.TH "{prog.upper()}" "1" "" "git-agentops {__version__}" "git-agentops manual"\n'
        f".SH NAME\n{_roff_escape(prog)} \\- {_roff_escape(summary)}\n"
        f".SH SYNOPSIS\n.B git {_roff_escape(prog.removeprefix('git-'))}\n[\\fIoptions\\fR]\n"
        f".SH DESCRIPTION\n.nf\n{_roff_escape(_all_help(parser))}\n.fi\n"
        ".SH EXIT STATUS\n0 ok; 1 a negative but valid answer; 2 usage error; 3 refused operation; "
        "4 internal error (traceback under $GIT_COMMON_DIR/agentops/log/); 130 interrupted.\n"
        ".SH SEE ALSO\n\\fBgit-agentops-doctor\\fR(1), README.md of git-agentops\n"
    )


def code_table() -> str:
    rows = ["| code | exit | meaning |", "|---|---|---|"]
    rows += [f"| `{code}` | {info.exit_status} | {info.summary} |" for code, info in CODES.items()]
    return "\n".join(rows)


def event_table() -> str:
    """README's table of event kinds: code, meaning, data keys (``?``: may be absent) with their JSON types."""
    rows = ["| event | meaning | data |", "|---|---|---|"]
    for code, kind in EVENTS.items():
        data = ", ".join(
            f"`{key}`{'' if field.required else '?'}: {' or '.join(field.types)}" for key, field in kind.fields.items()
        )
        rows.append(f"| `{code}` | {kind.meaning} | {data or '--'} |")
    return "\n".join(rows)


def _summary(doc: str | None) -> str:
    """The first paragraph of a docstring, on one line, safe in a table cell."""
    first = (doc or "").strip().split("\n\n", 1)[0]
    return " ".join(first.split()).replace("|", "\\|")


def architecture_table() -> str:
    """README's architecture table: every top-level package and module of :data:`git_agentops.layers.LAYERS`,
    highest layer first, with the first paragraph of its docstring and, for a package, its modules."""
    package = ROOT / "git_agentops"
    rows = ["| layer | package | what it holds |", "|---|---|---|"]
    for layer in sorted(set(LAYERS.values()), reverse=True):
        for name in sorted(n for n, rank in LAYERS.items() if rank == layer and n != "__init__"):
            module = importlib.import_module(f"git_agentops.{name}")
            cell = str(layer)
            if name in FEATURES:  # a feature room: its modules with their ranks, lowest first
                ranks = FEATURES[name]
                low = min(ranks.values())
                cell = f"{low}-{layer} (feature)" if low < layer else f"{layer} (feature)"
                parts = [f"{p} ({r})" for p, r in sorted(ranks.items(), key=lambda i: (i[1], i[0])) if p != "__init__"]
                where, modules = f"`{name}/`", f" Modules: {', '.join(f'`{p}`' for p in parts)}."
            elif (package / name).is_dir():
                parts = sorted(p.stem for p in (package / name).glob("*.py") if p.stem != "__init__")
                parts += sorted(p.name for p in (package / name).iterdir() if (p / "__init__.py").is_file())
                where, modules = f"`{name}/`", f" Modules: {', '.join(f'`{p}`' for p in parts)}."
            else:
                where, modules = f"`{name}`", ""
            rows.append(f"| {cell} | {where} | {_summary(module.__doc__)}{modules} |")
    return "\n".join(rows)


def _expected_readme(text: str) -> str:
    for begin, end, table in (
        (BEGIN, END, code_table()),
        (EVENTS_BEGIN, EVENTS_END, event_table()),
        (LAYERS_BEGIN, LAYERS_END, architecture_table()),
    ):
        found = re.search(re.escape(begin) + ".*?" + re.escape(end), text, re.DOTALL)
        if found is None:
            raise SystemExit(f"README.md lacks the {begin} ... {end} markers")
        text = f"{text[: found.start()]}{begin}\n{table}\n{end}{text[found.end() :]}"
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docgen", description=__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    stale: list[str] = []
    targets: dict[Path, str] = {ROOT / "man" / "man1" / f"git-agentops-{n}.1": man_page(n) for n in COMMANDS}
    readme = ROOT / "README.md"
    targets[readme] = _expected_readme(readme.read_text("utf-8"))
    from . import completion

    every = completion.specs()
    targets[ROOT / "completions" / "bash" / "git-agentops"] = completion.bash(every)
    for name in every:  # bash-completion loads a file by command name; git asks for git-agentops-<name>
        targets[ROOT / "completions" / "bash" / f"git-agentops-{name}"] = completion.bash_loader()
    targets[ROOT / "completions" / "zsh" / "_git-agentops"] = completion.zsh(every)
    for name in every:  # zsh's _git calls _git-agentops-<name> for `git agentops-<name>`: compinit autoloads it
        targets[ROOT / "completions" / "zsh" / f"_git-agentops-{name}"] = completion.zsh_loader(name)
    for path, content in targets.items():
        current = path.read_text("utf-8") if path.exists() else None
        if current != content:
            stale.append(str(path.relative_to(ROOT)))
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(content, "utf-8")
    if args.check and stale:
        sys.stderr.write("out of date (run python -m git_agentops.cli.docgen): " + ", ".join(stale) + "\n")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
