"""The task dependency graph of ``git agentops-run report --html``, as inline SVG.

One node per task, ``<g id="task-<taskId>" class="node">``; one edge per dependency, ``<path class="edge">`` whose
``data-from`` is the dependency and ``data-to`` the task that depends on it (the arrow points the same way). The
layout is deliberately simple: the root task alone on top, then one row per dependency depth (a task with no
dependency is at depth 0, any other one row below its deepest dependency), tasks in plan order within a row, each
row centred. Every title is escaped; a long one is cut on the node and shown whole in its tooltip.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Final

from ..model.task import Task

NODE_W: Final = 210
NODE_H: Final = 46
GAP_X: Final = 28
GAP_Y: Final = 58
PAD: Final = 16
LABEL_CHARS: Final = 27


def e(value: object) -> str:
    """``value`` as SVG text or a double-quoted attribute value: ``& < > " '`` escaped."""
    return html.escape("" if value is None else str(value), quote=True)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def layers(tasks: Sequence[Task], root_id: str | None) -> list[list[Task]]:
    """Rows of the graph: the root task alone on top, then the others by dependency depth (plan order within)."""
    known = {t.id: t for t in tasks}
    depth: dict[str, int] = {}

    def of(task_id: str, trail: frozenset[str]) -> int:
        if task_id in depth:
            return depth[task_id]
        deps = [d for d in known[task_id].dependencies if d in known and d not in trail and d != root_id]
        depth[task_id] = 1 + max((of(d, trail | {task_id}) for d in deps), default=-1)
        return depth[task_id]

    rows: list[list[Task]] = []
    root = known.get(root_id or "")
    if root is not None:
        rows.append([root])
    others = [t for t in tasks if t.id != root_id]
    for task in others:
        of(task.id, frozenset())
    offset = len(rows)
    for task in others:
        while len(rows) <= offset + depth[task.id]:
            rows.append([])
        rows[offset + depth[task.id]].append(task)
    return [row for row in rows if row]


def graph_svg(tasks: Sequence[Task], root_id: str | None) -> str:
    """The task graph as inline SVG: one node per task, one ``class="edge"`` path per dependency."""
    rows = layers(tasks, root_id)
    widest = max((len(row) for row in rows), default=1)
    width = PAD * 2 + widest * NODE_W + (widest - 1) * GAP_X
    height = PAD * 2 + len(rows) * NODE_H + max(len(rows) - 1, 0) * GAP_Y
    where: dict[str, tuple[float, float]] = {}
    for r, row in enumerate(rows):
        span = len(row) * NODE_W + (len(row) - 1) * GAP_X
        left = (width - span) / 2
        for i, task in enumerate(row):
            where[task.id] = (left + i * (NODE_W + GAP_X), PAD + r * (NODE_H + GAP_Y))
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="task dependency graph" width="{width:.0f}" '
        f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#8c959f"/></marker></defs>',
    ]
    for task in tasks:
        for dep in task.dependencies:
            if dep not in where or task.id not in where:
                continue
            (x1, y1), (x2, y2) = where[dep], where[task.id]
            sx, sy, tx, ty = x1 + NODE_W / 2, y1 + NODE_H, x2 + NODE_W / 2, y2 - 2
            mid = (sy + ty) / 2
            out.append(
                f'<path class="edge" data-from="{e(dep)}" data-to="{e(task.id)}" marker-end="url(#arrow)" '
                f'd="M{sx:.1f},{sy:.1f} C{sx:.1f},{mid:.1f} {tx:.1f},{mid:.1f} {tx:.1f},{ty:.1f}">'
                f"<title>{e(task.title)} depends on {e(dep)}</title></path>"
            )
    for task in tasks:
        x, y = where[task.id]
        kind = "node root" if task.id == root_id else "node"
        delivery = task.delivery
        sub = str(task.status) + (f" · gen {delivery.generation}" if delivery is not None else "")
        out.append(
            f'<g id="task-{e(task.id)}" class="{kind} st-{e(task.status)}" data-status="{e(task.status)}">'
            f"<title>{e(task.title)} ({e(task.id)})</title>"
            f'<a href="#about-{e(task.id)}"><rect x="{x:.1f}" y="{y:.1f}" width="{NODE_W}" height="{NODE_H}" '
            f'rx="7"/><text x="{x + 10:.1f}" y="{y + 19:.1f}">{e(_cut(task.title, LABEL_CHARS))}</text>'
            f'<text class="sub" x="{x + 10:.1f}" y="{y + 36:.1f}">{e(sub)}</text></a></g>'
        )
    out.append("</svg>")
    return "".join(out)
