"""The YAML a project declares what it runs in: its GitHub workflows and its pre-commit hooks -- read with PyYAML's
safe loader (imported only here), never run.

A workflow step's ``${{ matrix.X }}`` becomes one step per value the job's matrix gives X, so ``tox -e ${{
matrix.env }}`` names each environment; any other expression stays as written, and the command holding it is then
not recognised rather than guessed at. A step in another ``working-directory`` belongs to another project of a
monorepo and is left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from ..files import read_text

MAX_WORKFLOWS: Final = 50


def _yaml(path: Path) -> Any:
    import yaml  # only init reads YAML

    text = read_text(path)
    if text is None:
        return None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


# -- pre-commit ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hook:
    """One pre-commit hook: its repository, id, arguments, and for a local hook its entry."""

    repo: str
    id: str
    args: tuple[str, ...] = ()
    entry: str | None = None
    additional: tuple[str, ...] = ()


def read_precommit(root: Path) -> list[Hook]:
    doc = _yaml(root / ".pre-commit-config.yaml")
    hooks: list[Hook] = []
    repos = doc.get("repos") if isinstance(doc, dict) else None
    for repo in repos if isinstance(repos, list) else []:
        if not isinstance(repo, dict) or not isinstance(repo.get("hooks"), list):
            continue
        for hook in repo["hooks"]:
            if not isinstance(hook, dict) or not isinstance(hook.get("id"), str):
                continue
            args: list[Any] = hook["args"] if isinstance(hook.get("args"), list) else []
            more = hook.get("additional_dependencies")
            hooks.append(
                Hook(
                    str(repo.get("repo", "")),
                    hook["id"],
                    tuple(str(a) for a in args),
                    hook["entry"] if isinstance(hook.get("entry"), str) else None,
                    tuple(str(a) for a in more) if isinstance(more, list) else (),
                )
            )
    return hooks


# -- CI workflows ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CiStep:
    """One ``run:`` step of a CI workflow, with ``${{ matrix.X }}`` replaced by each value the matrix gives X."""

    file: str
    job: str
    script: str
    matrix: dict[str, str] = field(default_factory=dict)

    @property
    def origin(self) -> str:
        return f"{self.file} job {self.job}"


_EXPRESSION: Final = re.compile(r"\$\{\{\s*matrix\.([A-Za-z0-9_-]+)\s*\}\}")


def _matrix_values(job: dict[str, Any]) -> dict[str, list[str]]:
    strategy: dict[str, Any] = job["strategy"] if isinstance(job.get("strategy"), dict) else {}
    matrix: dict[str, Any] = strategy["matrix"] if isinstance(strategy.get("matrix"), dict) else {}
    values: dict[str, list[str]] = {}
    for key, items in matrix.items():
        if isinstance(items, list) and key not in ("include", "exclude"):
            values[key] = [str(i) for i in items if isinstance(i, str | int | float)]
    for extra in matrix.get("include", []) if isinstance(matrix.get("include"), list) else []:
        for key, value in extra.items() if isinstance(extra, dict) else []:
            if isinstance(value, str | int | float) and str(value) not in values.setdefault(key, []):
                values[key].append(str(value))
    return values


def read_workflows(root: Path) -> list[CiStep]:
    """Every ``run:`` step of ``.github/workflows/*.yml`` (file order, job order, step order).

    A step that runs in another ``working-directory`` is left out (its commands belong to another project of a
    monorepo); a ``${{ matrix.X }}`` gives one step per value of X; any other expression stays as written.
    """
    folder = root / ".github" / "workflows"
    try:
        files = sorted(p for p in folder.iterdir() if p.suffix in (".yml", ".yaml"))[:MAX_WORKFLOWS]
    except OSError:
        return []
    steps: list[CiStep] = []
    for path in files:
        doc = _yaml(path)
        jobs = doc.get("jobs") if isinstance(doc, dict) else None
        for job_id, job in jobs.items() if isinstance(jobs, dict) else []:
            if not isinstance(job, dict) or not isinstance(job.get("steps"), list):
                continue
            defaults = job.get("defaults", {}).get("run", {}) if isinstance(job.get("defaults"), dict) else {}
            matrix = _matrix_values(job)
            for step in job["steps"]:
                if not isinstance(step, dict) or not isinstance(step.get("run"), str):
                    continue
                where = step.get(
                    "working-directory", defaults.get("working-directory") if isinstance(defaults, dict) else None
                )
                if where not in (None, ".", "./"):
                    continue
                for script, chosen in _expand_matrix(step["run"], matrix):
                    steps.append(CiStep(f".github/workflows/{path.name}", str(job_id), script, chosen))
    return steps


def _expand_matrix(script: str, matrix: dict[str, list[str]]) -> list[tuple[str, dict[str, str]]]:
    keys = sorted({m.group(1) for m in _EXPRESSION.finditer(script)} & set(matrix))
    if not keys:
        return [(script, {})]
    out: list[tuple[str, dict[str, str]]] = []
    key, rest = keys[0], dict(matrix)
    for value in rest.pop(key) or [""]:
        replaced = re.sub(r"\$\{\{\s*matrix\." + re.escape(key) + r"\s*\}\}", value, script)
        for text, chosen in _expand_matrix(replaced, rest):
            if text not in [t for t, _ in out]:
                out.append((text, {key: value, **chosen}))
    return out
