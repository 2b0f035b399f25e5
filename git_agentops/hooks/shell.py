"""Split a shell command line into the simple commands it would run, each as its argv.

Why: an agent's Bash tool gets one string, and the destructive part can hide anywhere in it --
``git add -A && git reset --hard``, ``echo "$(rm -rf ~)"``, ``(cd .. && rm -rf .)``, a heredoc. The guard in
:mod:`.agent` judges every simple command, so this lexer finds them all: it follows quotes and backslashes as
the shell does, splits on ``&&``, ``||``, ``;``, ``|``, ``&`` and newlines, descends into ``$(...)``, backticks,
``<(...)``/``>(...)``, subshells and ``${...}`` (also inside double quotes and unquoted heredoc bodies, where the
shell still substitutes), drops redirections (``2>&1``, ``> out``) from the argv, and skips heredoc bodies --
Claude Code writes its commit messages as ``git commit -m "$(cat <<'EOF' ... EOF)"``, whose apostrophes would
otherwise look like unterminated quotes.

Nothing is expanded: ``$HOME`` stays ``$HOME``, ``*`` stays ``*``; the rules decide what such a word may mean.
Anything the lexer cannot follow (an unterminated quote or substitution, an unbalanced ``)``) raises
:class:`ShellSyntaxError`, which the guard turns into a refusal: a command it cannot read is not one it lets
through. Constructs it does not model (``case`` patterns with ``)``, ``[[ a < b ]]``) are refused the same way,
or read conservatively; agents rarely need them in one line.

Standard library only, and only :mod:`os`-level cost: this runs before every command an agent issues.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Final

_OPERATOR_CHARS: Final = frozenset(";&|\n")
_BLANKS: Final = frozenset(" \t\r")
_WRAPPER_DEPTH: Final = 8


class ShellSyntaxError(ValueError):
    """The command line is not one this lexer can follow; ``str()`` says where."""


class _Word:
    __slots__ = ("chars", "quoted")

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.quoted = False


def simple_commands(text: str) -> list[list[str]]:
    """Every simple command of ``text`` (the shell line) as its argv, in order of appearance; substitutions and
    subshells give commands of their own. Empty commands are dropped. Raises :class:`ShellSyntaxError`."""
    lexer = _Lexer(text, [])
    lexer.parse(closing=None)
    return [argv for argv in lexer.commands if argv]


def skip_options(args: Sequence[str], takes_value: str, long_values: Sequence[str] = ()) -> list[str]:
    """``args`` after the leading options of a wrapper (``sudo -u x``, ``nice -n 5``, ``timeout -s 9``)."""
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "-":
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if arg.startswith("--"):
            if "=" not in arg and arg[2:] in long_values:
                i += 1
            continue
        for position, ch in enumerate(arg[1:], 1):
            if ch in takes_value:
                i += position == len(arg) - 1  # the value is the next argument unless attached
                break
    return list(args[i:])


def unwrap(argv: list[str], depth: int = 0) -> list[tuple[list[str], list[str]]]:
    """The commands a simple command really runs, each as (leading ``NAME=value`` assignments, argv): wrappers
    (``sudo``, ``env``, ``command``, ``nice``, ``timeout``, ``xargs``...) and keywords are peeled off, and
    ``sh -c SCRIPT``/``eval WORDS`` are parsed as command lines of their own."""
    if depth > _WRAPPER_DEPTH:
        raise ShellSyntaxError("wrappers nested too deeply")
    assignments: list[str] = []
    while argv:
        head = argv[0]
        name = head.rsplit("/", 1)[-1]
        if "=" in head and head.split("=", 1)[0].isidentifier():
            assignments.append(head)
            argv = argv[1:]
        elif name in ("{", "}", "!", "if", "then", "else", "elif", "fi", "do", "done", "while", "until"):
            argv = argv[1:]
        elif name in ("for", "case", "select", "function", "in", "esac"):
            return []
        elif name in ("sudo", "doas"):
            argv = skip_options(argv[1:], "ugpChDrtTU", ("user", "group", "prompt", "chdir", "host"))
        elif name == "env":
            rest = argv[1:]
            split = next((rest[i + 1] for i, a in enumerate(rest[:-1]) if a in ("-S", "--split-string")), None)
            if split is not None:
                return [c for argv2 in simple_commands(split) for c in unwrap(argv2, depth + 1)]
            argv = skip_options(rest, "uCS", ("unset", "chdir", "split-string"))
        elif name == "command":
            rest = skip_options(argv[1:], "")
            if any(a in ("-v", "-V") for a in argv[1 : len(argv) - len(rest)]):
                return []  # a lookup, not a run
            argv = rest
        elif name in ("builtin", "exec", "nohup", "time", "nice", "stdbuf", "ionice", "timeout", "xargs"):
            values = {"exec": "a", "nice": "n", "stdbuf": "ioe", "ionice": "cnp", "timeout": "sk", "xargs": "aIdEeLnPs"}
            argv = skip_options(argv[1:], values.get(name, ""), ("signal", "kill-after", "adjustment"))
            if name == "timeout" and argv:
                argv = argv[1:]  # the duration
        elif name in ("sh", "bash", "zsh", "dash", "ksh") and len(argv) > 2:
            flags = [a for a in argv[1:] if a.startswith("-") and not a.startswith("--")]
            if not any("c" in flag for flag in flags):
                break
            script = next((a for a in argv[1:] if not a.startswith("-")), "")
            return [c for argv2 in simple_commands(script) for c in unwrap(argv2, depth + 1)]
        elif name == "eval":
            return [c for argv2 in simple_commands(" ".join(argv[1:])) for c in unwrap(argv2, depth + 1)]
        else:
            break
    return [(assignments, argv)] if argv else []


class _Lexer:
    __slots__ = ("commands", "pos", "text")

    def __init__(self, text: str, commands: list[list[str]]) -> None:
        self.text = text
        self.pos = 0
        self.commands = commands

    def _fail(self, what: str) -> ShellSyntaxError:
        return ShellSyntaxError(f"{what} at character {self.pos + 1}")

    def parse(self, *, closing: str | None) -> None:
        """Read commands until the end of the text, or until the unmatched ``closing`` character (``)`` of a
        ``$(``, ``(``, ``<(``), which is consumed."""
        text = self.text
        argv: list[str] = []
        word: _Word | None = None
        redirect = False  # the next word is a redirection target, not an argument
        heredoc: bool | None = None  # the next word is a heredoc delimiter (True: "<<-", leading tabs stripped)
        pending: list[tuple[str, bool, bool]] = []  # heredocs whose bodies start after the next newline

        def end_word() -> None:
            nonlocal word, redirect, heredoc
            if word is None:
                return
            value = "".join(word.chars)
            if heredoc is not None:
                pending.append((value, heredoc, word.quoted))
                heredoc = None
                redirect = False
            elif redirect:
                redirect = False
            else:
                argv.append(value)
            word = None

        def end_command() -> None:
            nonlocal argv
            end_word()
            if redirect or heredoc is not None:
                raise self._fail("a redirection without a target")
            if argv:
                self.commands.append(argv)
            argv = []

        while self.pos < len(text):
            ch = text[self.pos]
            if ch in _BLANKS:
                end_word()
                self.pos += 1
                continue
            if ch == "\\":
                if text.startswith("\\\n", self.pos):
                    self.pos += 2
                    continue
                word = word or _Word()
                word.quoted = True
                word.chars.append(text[self.pos + 1 : self.pos + 2])
                self.pos += 2
                continue
            if ch == "'":
                end = text.find("'", self.pos + 1)
                if end < 0:
                    raise self._fail("an unterminated single quote")
                word = word or _Word()
                word.quoted = True
                word.chars.append(text[self.pos + 1 : end])
                self.pos = end + 1
                continue
            if ch == '"':
                word = word or _Word()
                word.quoted = True
                self.pos += 1
                word.chars.append(self._double_quoted(terminator='"'))
                continue
            if ch == "`":
                word = word or _Word()
                word.chars.append(self._backticks())
                continue
            if ch == "$" and text.startswith("$(", self.pos):
                start = self.pos
                self.pos += 2
                self.parse(closing=")")
                word = word or _Word()
                word.chars.append(text[start : self.pos])
                continue
            if ch == "$" and text.startswith("${", self.pos):
                word = word or _Word()
                word.chars.append(self._braced())
                continue
            if ch in "<>" and text.startswith("(", self.pos + 1) and word is None:
                self.pos += 2
                self.parse(closing=")")
                continue
            if ch in "<>" or (ch == "&" and text.startswith(">", self.pos + 1)):
                if ch != "&" and word is not None and not word.quoted and "".join(word.chars).isdigit():
                    word = None  # "2>": the digits name a file descriptor
                end_word()
                operator = self._redirection()
                if operator in ("<<", "<<-"):
                    heredoc = operator == "<<-"
                redirect = operator not in (">&-", "<&-")
                continue
            if ch == "#" and word is None:
                newline = text.find("\n", self.pos)
                self.pos = len(text) if newline < 0 else newline
                continue
            if ch == "(":
                end_command()
                self.pos += 1
                self.parse(closing=")")
                continue
            if ch == ")":
                end_command()
                self.pos += 1
                if closing != ")":
                    raise ShellSyntaxError(f"an unbalanced ')' at character {self.pos}")
                if pending:
                    raise self._fail("a heredoc without a body")
                return
            if ch in _OPERATOR_CHARS:
                end_command()
                self.pos += 1
                if ch == "\n" and pending:
                    for delimiter, strip_tabs, quoted in pending:
                        self._heredoc_body(delimiter, strip_tabs=strip_tabs, quoted=quoted)
                    pending = []
                continue
            word = word or _Word()
            word.chars.append(ch)
            self.pos += 1
        end_command()
        if closing is not None:
            raise self._fail(f"an unterminated substitution (no closing {closing!r})")

    def _redirection(self) -> str:
        """Skip one redirection operator and return it (``>``, ``>>``, ``<``, ``<<``, ``<<-``, ``<<<``, ``>&``,
        ``<&``, ``>|``, ``<>``, ``&>``, ``&>>``; ``>&-``/``<&-``, which close a descriptor and take no target)."""
        text = self.text
        for operator in ("&>>", "<<<", "<<-", "&>", ">>", "<<", ">&", "<&", ">|", "<>", ">", "<"):
            if text.startswith(operator, self.pos):
                self.pos += len(operator)
                if operator in (">&", "<&") and text.startswith("-", self.pos):
                    self.pos += 1
                    return operator + "-"
                return operator
        raise self._fail("an unknown redirection")  # unreachable: called on '<', '>' or '&>'

    def _double_quoted(self, *, terminator: str | None) -> str:
        """The text up to the closing ``terminator`` (consumed; None: the end of the text), with the shell's
        double-quote escapes undone; substitutions inside are parsed as commands of their own."""
        text = self.text
        out: list[str] = []
        while self.pos < len(text):
            ch = text[self.pos]
            if terminator is not None and ch == terminator:
                self.pos += 1
                return "".join(out)
            if ch == "\\" and self.pos + 1 < len(text) and text[self.pos + 1] in '$`"\\\n':
                if text[self.pos + 1] != "\n":
                    out.append(text[self.pos + 1])
                self.pos += 2
            elif text.startswith("$(", self.pos):
                start = self.pos
                self.pos += 2
                self.parse(closing=")")
                out.append(text[start : self.pos])
            elif text.startswith("${", self.pos):
                out.append(self._braced())
            elif ch == "`":
                out.append(self._backticks())
            else:
                out.append(ch)
                self.pos += 1
        if terminator is not None:
            raise self._fail("an unterminated double quote")
        return "".join(out)

    def _backticks(self) -> str:
        """A `` `...` `` substitution (from its opening backtick): its commands are parsed; returns its text."""
        text = self.text
        start = self.pos
        body: list[str] = []
        self.pos += 1
        while self.pos < len(text) and text[self.pos] != "`":
            if text[self.pos] == "\\" and self.pos + 1 < len(text):
                following = text[self.pos + 1]
                body.append(following if following in "`$\\" else text[self.pos : self.pos + 2])
                self.pos += 2
            else:
                body.append(text[self.pos])
                self.pos += 1
        if self.pos >= len(text):
            raise self._fail("an unterminated backtick substitution")
        self.pos += 1
        _Lexer("".join(body), self.commands).parse(closing=None)
        return text[start : self.pos]

    def _braced(self) -> str:
        """A ``${...}`` expansion (from its ``$``): substitutions in its word (``${x:-$(cmd)}``) are parsed."""
        text = self.text
        start = self.pos
        depth = 0
        while self.pos < len(text):
            ch = text[self.pos]
            if ch == "\\":
                self.pos += 2
                continue
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    self.pos += 1
                    inner = _Lexer(text[start + 2 : self.pos - 1], self.commands)
                    inner._double_quoted(terminator=None)
                    return text[start : self.pos]
            self.pos += 1
        raise self._fail("an unterminated ${...}")

    def _heredoc_body(self, delimiter: str, *, strip_tabs: bool, quoted: bool) -> None:
        """Skip a heredoc body (from the line after its operator) through its delimiter line; an unquoted
        delimiter means the shell substitutes in the body, so its substitutions are parsed."""
        text = self.text
        start = self.pos
        while self.pos < len(text):
            newline = text.find("\n", self.pos)
            end = len(text) if newline < 0 else newline
            line = text[self.pos : end]
            if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                body = text[start : self.pos]
                self.pos = min(end + 1, len(text))
                break
            self.pos = end + 1
        else:
            body = text[start:]  # the shell warns and takes the rest as the body
            self.pos = len(text)
        if not quoted:
            _Lexer(body, self.commands)._double_quoted(terminator=None)
