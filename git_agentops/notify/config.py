"""The person's own configuration file, ``$XDG_CONFIG_HOME/git-agentops/config.toml`` (``~/.config/...``): where
``[notify]`` lives, because being woken up is the person's choice and no repository may name commands that run on
their machine for it."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path

from ..errors import AgentOpsError
from .record import NotifyConfig


def config_path(environ: Mapping[str, str]) -> Path:
    """Where the person's configuration is read from."""
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(environ.get("HOME", os.path.expanduser("~")), ".config")
    return Path(base) / "git-agentops" / "config.toml"


def load_notify(environ: Mapping[str, str]) -> NotifyConfig:
    """The ``[notify]`` table of the person's configuration (empty when there is none);
    ``NOTIFY_CONFIG_INVALID`` when the file cannot be read as TOML or the table is wrong."""
    path = config_path(environ)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return NotifyConfig()
    except (OSError, UnicodeDecodeError) as exc:
        raise AgentOpsError("NOTIFY_CONFIG_INVALID", f"{path}: cannot be read: {exc}") from exc
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AgentOpsError("NOTIFY_CONFIG_INVALID", f"{path}: not TOML: {exc}") from exc
    table = doc.get("notify", {})
    if not isinstance(table, dict):
        raise AgentOpsError("NOTIFY_CONFIG_INVALID", f"{path}: [notify] must be a table")
    return NotifyConfig.from_doc(table, source=str(path))
