"""The package's layers: each top-level package or module ranked; a module imports only its own package or lower.

``tests/test_architecture.py`` checks every import against this list (at module level, in functions and under
``TYPE_CHECKING``, so a cycle cannot hide), and README's architecture table is generated from it and from each
package's docstring (``python -m git_agentops.cli.docgen``): the ranking and the description cannot drift apart.
"""

from __future__ import annotations

from typing import Final

LAYERS: Final[dict[str, int]] = {
    **dict.fromkeys(("__init__", "errors", "eventkinds", "clock", "resources", "files", "layers"), 0),
    "canonical": 1,
    **dict.fromkeys(("schema", "process"), 2),
    **dict.fromkeys(("gitstore", "model"), 3),
    **dict.fromkeys(("envs", "sandbox"), 4),
    "policy": 5,
    **dict.fromkeys(("verify", "protocol", "receipts"), 6),
    **dict.fromkeys(("hosts", "hooks"), 7),
    "runs": 8,
    "integrate": 9,
    "supervisor": 10,
    "cli": 11,
}
"""Each top-level package's (or module's) layer: 0 foundations (errors, event kinds, time, shipped files), 1
canonical JSON, 2 documents and processes, 3 the store and the values, 4 environments and walls, 5 policy, 6
verification/protocol/receipts, 7 hosts and hooks, 8 runs, 9 integration, 10 the supervisor, 11 the CLI."""
