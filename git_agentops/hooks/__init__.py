"""Repository hook logic and the facts every part of the toolkit shares about hooks.

The shims that ``git agentops-init --hooks`` installs are a few lines of shell carrying :data:`MARKER`; this
package decides what they enforce. It must stay cheap to import -- hooks run on every commit -- so it imports
neither :mod:`typing` nor :mod:`pathlib` at run time.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Final, Literal

    HookState = Literal["installed", "foreign", "missing"]

MARKER: Final = "# git-agentops hook shim"
HOOK_NAMES: Final = ("pre-commit", "pre-merge-commit", "post-merge", "pre-push", "reference-transaction")


def hook_state(hooks_dir: Path, name: str) -> HookState:
    """Whether ``hooks_dir/name`` is our shim, someone else's hook, or absent."""
    path = hooks_dir / name
    try:
        head = path.read_bytes()[:4096]
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return "missing"
    return "installed" if MARKER.encode() in head else "foreign"
