"""What the benchmarks share: this checkout importable, a fixed git identity, and a git helper that fails loudly.

Each benchmark is a script (``python bench/<name>.py``), so Python puts ``bench/`` on ``sys.path`` and they
import this module directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

NAME, EMAIL = "bench", "bench@example.invalid"
ENV = {
    **os.environ,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": NAME,
    "GIT_AUTHOR_EMAIL": EMAIL,
    "GIT_COMMITTER_NAME": NAME,
    "GIT_COMMITTER_EMAIL": EMAIL,
}


def git(
    cwd: Path,
    *args: str,
    input: str | bytes | None = None,
    config: tuple[str, ...] = (),
    env: Mapping[str, str] = ENV,
) -> str:
    """``git -c <config>... <args>`` in ``cwd``; its stdout stripped. Exits with git's stderr when it fails."""
    cfg = [arg for pair in config for arg in ("-c", pair)]
    data = input.encode() if isinstance(input, str) else input
    done = subprocess.run(["git", *cfg, *args], cwd=cwd, input=data, capture_output=True, env=dict(env), check=False)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode(errors="replace").strip()
