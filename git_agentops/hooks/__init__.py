"""Repository hook logic and the facts every part of the toolkit shares about hooks.

The shims that ``git agentops-init --hooks`` installs are a few lines of shell carrying :data:`MARKER`; this
package decides what they enforce. It must stay cheap to import -- hooks run on every commit -- so it imports
neither :mod:`typing` nor :mod:`pathlib` at run time.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Final

MARKER: Final = "# git-agentops hook shim"
HOOK_NAMES: Final = ("pre-commit", "pre-merge-commit", "post-merge", "pre-push", "reference-transaction")
