"""The package's layers: each top-level package or module ranked; a module imports only its own package or lower.

Two kinds of package sit on the layers. A *layer package* (``gitstore``, ``runs``...) holds one kind of work, and
all of it at one layer. A *feature package* (:data:`FEATURES`) is one room per concept -- the policy transition,
say, from its record to the supervisor's driving of it -- and ranks each of its modules at the layer of what that
module does: the record with the values, the journal with the runs, the drive with the supervisor. A feature's
module ranked at a layer is a member of that layer: it, the layer's packages and other rooms' modules of that rank
may import each other (the graph staying acyclic, which the architecture test checks separately); it imports its
own feature's modules of the same rank or lower, never upward, so a room does not let a value reach the supervisor
through the back door.

``tests/test_architecture.py`` checks every import against this list (at module level, in functions and under
``TYPE_CHECKING``, so a cycle cannot hide), and README's architecture table is generated from it and from each
package's docstring (``python -m git_agentops.cli.docgen``): the ranking and the description cannot drift apart.
"""

from __future__ import annotations

from typing import Final

FEATURES: Final[dict[str, dict[str, int]]] = {
    "verify": {
        **dict.fromkeys(("__init__", "confined_setup", "workspaces"), 4),
        **dict.fromkeys(
            ("core", "credentials", "evidence", "failing", "held", "made", "parsers", "redact", "slots", "worker"), 6
        ),
        "proof": 8,
    },
    "transition": {"__init__": 3, "record": 3, "journal": 8, "propose": 10, "drive": 10},
    "lease": {"__init__": 3, "record": 3, "claim": 8, "tenure": 10},
    "report": {"__init__": 3, "record": 3, "graph": 3, "html": 3, "markdown": 3, "collect": 8},
    "watch": {"__init__": 3, "view": 3},
    "mergequeue": {"__init__": 3, "record": 3, "shared": 8, "book": 8, "audit": 8, "process": 9, "serve": 9},
    "notify": {"__init__": 3, "record": 3, "config": 4, "deliver": 8},
    "controls": {"__init__": 3, "record": 3, "signing": 6, "send": 8, "apply": 8, "people": 8},
    "workspace": {"__init__": 3, "ports": 4, "services": 4, "localfiles": 4, "salvage": 4, "live": 4, "cost": 4},
}
"""Feature packages: each module (``__init__`` included) ranked at the layer of what it does, as :data:`LAYERS`
ranks a layer package."""


LAYERS: Final[dict[str, int]] = {
    **dict.fromkeys(("__init__", "errors", "eventkinds", "clock", "resources", "files", "layers"), 0),
    "canonical": 1,
    **dict.fromkeys(("schema", "process"), 2),
    **dict.fromkeys(("gitstore", "model"), 3),
    **dict.fromkeys(("envs", "sandbox", "service"), 4),
    "policy": 5,
    **dict.fromkeys(("protocol", "receipts"), 6),
    **dict.fromkeys(("hosts", "hooks"), 7),
    **dict.fromkeys(("runs", "diagnose"), 8),
    "integrate": 9,
    **dict.fromkeys(("supervisor", "demo"), 10),
    "cli": 11,
    **{name: max(ranks.values()) for name, ranks in FEATURES.items()},
}
"""Each top-level package's (or module's) layer: 0 foundations (errors, event kinds, time, shipped files), 1
canonical JSON, 2 documents and processes, 3 the store and the values, 4 environments, walls and service managers,
5 policy, 6 verification's commands and evidence/protocol/receipts, 7 hosts and hooks, 8 runs (and a run's proofs)
and health checks, 9 integration, 10 the supervisor and the demo, 11 the CLI. A feature package is listed at its
highest module's rank, derived from :data:`FEATURES`, so that README's table lists it once, where a reader looking for
its entry point finds it."""


def rank(module: str) -> int:
    """The layer of a module named below ``git_agentops`` (``"runs.state"``, ``"transition.drive"``, ``"errors"``):
    its own rank in a feature package, its package's rank otherwise."""
    top, _, rest = module.partition(".")
    if top in FEATURES:
        return FEATURES[top][rest.partition(".")[0] or "__init__"]
    return LAYERS[top]


def may_import(importer: str, imported: str) -> bool:
    """Whether ``importer`` may import ``imported`` (both named below ``git_agentops``): anything in its own layer
    package; in its own feature, a module of the same rank or lower; elsewhere a lower layer, or -- when either
    side is a feature's module -- the same layer."""
    mine, theirs = importer.partition(".")[0], imported.partition(".")[0]
    if mine == theirs:
        return mine not in FEATURES or rank(imported) <= rank(importer)
    if rank(imported) < rank(importer):
        return True
    return rank(imported) == rank(importer) and (mine in FEATURES or theirs in FEATURES)
