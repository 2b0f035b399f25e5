"""Where the data files that ship with the toolkit live.

The JSON Schemas and hook shims sit at the top of the source repository (``schemas/``, ``hooks/``). A wheel
carries them inside the package as ``git_agentops/_data/``; an editable install or a source checkout reads them in
place. Both layouts resolve here and nowhere else.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


@cache
def data_dir(name: str) -> Path:
    """The directory of shipped data files ``name`` (``"schemas"`` or ``"hooks"``)."""
    for candidate in (_PACKAGE_DIR / "_data" / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"git-agentops data directory {name!r} is missing from this installation")
