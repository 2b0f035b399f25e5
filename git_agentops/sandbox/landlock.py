"""Landlock through ctypes: confine the calling thread, and every process it starts, to a list of paths.

Landlock (Linux >= 5.13) lets an unprivileged process drop filesystem rights for itself and its future children,
irrevocably: a *ruleset* names the rights it handles, each rule grants some of them beneath one file or directory,
and ``landlock_restrict_self`` enforces it on the calling thread. Every handled right that no rule grants is
denied (EACCES), to root as well. We handle *every* filesystem right the running kernel knows, so an agent reaches
exactly the paths its rules list; network rights are not handled (agents call their model APIs over TCP).

Best effort across kernels: the running ABI (:func:`abi`) decides which rights exist -- REFER came with ABI 2,
TRUNCATE with 3, IOCTL_DEV with 5, the ``scoped`` signal and abstract-socket isolation with 6 -- and only those are
handled, so the same rules work on every kernel that has Landlock at all, enforcing as much as it can. Rights a
kernel newer than ABI 7 adds are not handled, hence not denied, until this module learns them.

This module is loaded by path by the standalone launcher (``python3 -I -S launcher.py``), so it imports only the
standard library and nothing of ``git_agentops``. :func:`apply` restricts the *calling thread* only: call it in a
single-threaded child just before ``exec``.
"""

from __future__ import annotations

import ctypes
import enum
import errno
import os
import stat

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: the launcher pays for every import on each agent start
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence
    from typing import Final

# x86_64, aarch64, riscv64... share these numbers: Landlock came after the syscall tables were unified
SYS_LANDLOCK_CREATE_RULESET: Final = 444
SYS_LANDLOCK_ADD_RULE: Final = 445
SYS_LANDLOCK_RESTRICT_SELF: Final = 446
LANDLOCK_CREATE_RULESET_VERSION: Final = 1 << 0
LANDLOCK_RULE_PATH_BENEATH: Final = 1
PR_SET_NO_NEW_PRIVS: Final = 38
SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0  # ABI 6
SCOPE_SIGNAL: Final = 1 << 1  # ABI 6
KNOWN_ABI: Final = 7
"""The newest ABI this module was written against; a newer kernel is used at this level."""


class Access(enum.IntFlag):
    """``LANDLOCK_ACCESS_FS_*`` (include/uapi/linux/landlock.h)."""

    EXECUTE = 1 << 0
    WRITE_FILE = 1 << 1
    READ_FILE = 1 << 2
    READ_DIR = 1 << 3
    REMOVE_DIR = 1 << 4
    REMOVE_FILE = 1 << 5
    MAKE_CHAR = 1 << 6
    MAKE_DIR = 1 << 7
    MAKE_REG = 1 << 8
    MAKE_SOCK = 1 << 9
    MAKE_FIFO = 1 << 10
    MAKE_BLOCK = 1 << 11
    MAKE_SYM = 1 << 12
    REFER = 1 << 13  # ABI 2: link/rename into another directory; ABI 1 always refuses it
    TRUNCATE = 1 << 14  # ABI 3
    IOCTL_DEV = 1 << 15  # ABI 5: ioctl on character and block devices


_SINCE: Final[Mapping[Access, int]] = {Access.REFER: 2, Access.TRUNCATE: 3, Access.IOCTL_DEV: 5}

FILE_RIGHTS: Final = Access.EXECUTE | Access.WRITE_FILE | Access.READ_FILE | Access.TRUNCATE | Access.IOCTL_DEV
"""The rights that mean something on a non-directory; a rule on a file may grant no other (EINVAL)."""

NAMES: Final[Mapping[str, Access]] = {
    "read": Access.READ_FILE | Access.READ_DIR,
    "list": Access.READ_DIR,  # a directory's names, not its files' contents (the split directories of a carve)
    "execute": Access.EXECUTE,
    "write": Access.WRITE_FILE
    | Access.TRUNCATE
    | Access.MAKE_CHAR
    | Access.MAKE_DIR
    | Access.MAKE_REG
    | Access.MAKE_SOCK
    | Access.MAKE_FIFO
    | Access.MAKE_BLOCK
    | Access.MAKE_SYM
    | Access.REMOVE_DIR
    | Access.REMOVE_FILE
    | Access.REFER
    | Access.IOCTL_DEV,
}
"""What each access word of a rule grants (masked to the running ABI)."""


class LandlockError(OSError):
    """A Landlock step failed; ``errno``, ``strerror`` and ``filename`` (the rule's path, if any) say which."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),  # ABI 4
        ("scoped", ctypes.c_uint64),  # ABI 6
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # __attribute__((packed)): 12 bytes
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]


def abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is missing, disabled at boot or refused (seccomp)."""
    version = _syscall(ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def handled_access(version: int) -> Access:
    """Every filesystem right ABI ``version`` knows (none for 0): what a ruleset handles, hence denies by default."""
    if version < 1:
        return Access(0)
    mask = Access(0)
    for flag in Access:
        if _SINCE.get(flag, 1) <= version:
            mask |= flag
    return mask


def ruleset_size(version: int) -> int:
    """``sizeof(struct landlock_ruleset_attr)`` as ABI ``version`` reads it: 8, 16 (net, ABI 4) or 24 (scoped)."""
    return 8 if version < 4 else 16 if version < 6 else 24


def scopes(version: int, *, signals: bool, abstract_unix: bool) -> int:
    """The ``scoped`` bits to ask for; 0 below ABI 6, which knows none (an unknown bit is EINVAL)."""
    if version < 6:
        return 0
    return (SCOPE_SIGNAL if signals else 0) | (SCOPE_ABSTRACT_UNIX_SOCKET if abstract_unix else 0)


def access_for(names: Iterable[str], version: int, *, directory: bool) -> Access:
    """The rights ``names`` grant under ABI ``version``, without directory-only rights when not ``directory``."""
    mask = Access(0)
    for name in names:
        mask |= NAMES[name]
    mask &= handled_access(version)
    return mask if directory else mask & FILE_RIGHTS


def check_rules(rules: Sequence[Mapping[str, object]]) -> list[tuple[str, tuple[str, ...]]]:
    """Validate rules of the form ``{"path": "/abs", "access": ["read", "write", "execute"]}``.

    Returns ``(path, access words)`` pairs; raises ValueError naming the offending rule: not an object, an unknown
    key, a relative path or one with NUL, an empty or unknown access word.
    """
    checked = []
    for index, rule in enumerate(rules):
        if not isinstance(rule, dict) or set(rule) != {"path", "access"}:
            raise ValueError(f"rule {index} must be an object with exactly 'path' and 'access'")
        path, access = rule["path"], rule["access"]
        if not isinstance(path, str) or not path.startswith("/") or "\0" in path:
            raise ValueError(f"rule {index}: path must be an absolute path, not {path!r}")
        if not isinstance(access, list) or not access or not all(isinstance(a, str) and a in NAMES for a in access):
            raise ValueError(f"rule {index} ({path}): access must be a non-empty list of {sorted(NAMES)}")
        checked.append((path, tuple(access)))
    return checked


def _check(result: int, what: str, path: str | None = None) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise LandlockError(code, f"{what}: {os.strerror(code)}", path)
    return int(result)


def apply(
    rules: Sequence[Mapping[str, object]],
    *,
    scope_signals: bool = True,
    scope_abstract_unix: bool = True,
    on_missing: Callable[[str], None] | None = None,
) -> int:
    """Confine the calling thread (and all it will start) to ``rules``; returns the ABI enforced.

    Sets ``PR_SET_NO_NEW_PRIVS``, creates a ruleset handling every filesystem right of the running ABI (network
    rights are left alone), adds one path-beneath rule per entry and restricts the thread. A rule whose path does
    not exist (ENOENT, ENOTDIR) is skipped and passed to ``on_missing``; a rule on a non-directory grants only the
    file rights of its words. With ABI >= 6, ``scope_signals`` stops the sandbox signalling any process outside it
    and ``scope_abstract_unix`` stops it connecting to abstract UNIX sockets made outside it; older ABIs cannot.

    Raises ValueError for malformed rules (see :func:`check_rules`) and :class:`LandlockError` when Landlock is
    unavailable (EOPNOTSUPP) or a step fails (errno, step and path named). Irreversible: on success the thread stays
    confined; on failure it may already have NO_NEW_PRIVS set, but no Landlock domain.
    """
    checked = check_rules(rules)
    version = abi()
    if version < 1:
        raise LandlockError(errno.EOPNOTSUPP, "Landlock is not available on this kernel")
    version = min(version, KNOWN_ABI)
    handled = handled_access(version)
    attr = _RulesetAttr(int(handled), 0, scopes(version, signals=scope_signals, abstract_unix=scope_abstract_unix))
    _check(_prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    ruleset = _check(
        _syscall(
            ctypes.c_long(SYS_LANDLOCK_CREATE_RULESET),
            ctypes.byref(attr),
            ctypes.c_size_t(ruleset_size(version)),
            ctypes.c_uint32(0),
        ),
        "landlock_create_ruleset",
    )
    try:
        for path, names in checked:
            _add_rule(ruleset, path, names, version, on_missing)
        _check(
            _syscall(ctypes.c_long(SYS_LANDLOCK_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)
    return version


def _add_rule(
    ruleset: int, path: str, names: tuple[str, ...], version: int, on_missing: Callable[[str], None] | None
) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        if on_missing is not None:
            on_missing(path)
        return
    except OSError as exc:
        raise LandlockError(exc.errno, f"cannot open a rule's path: {exc.strerror}", path) from exc
    try:
        directory = stat.S_ISDIR(os.fstat(fd).st_mode)
        beneath = _PathBeneathAttr(int(access_for(names, version, directory=directory)), fd)
        _check(
            _syscall(
                ctypes.c_long(SYS_LANDLOCK_ADD_RULE),
                ctypes.c_int(ruleset),
                ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                ctypes.byref(beneath),
                ctypes.c_uint32(0),
            ),
            "landlock_add_rule",
            path,
        )
    finally:
        os.close(fd)
