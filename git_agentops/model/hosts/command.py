"""Any program the policy names (``kind = "command"``): its own argv, nothing assumed about what it prints.

For an agent CLI without a kind of its own: the policy gives ``argv`` (and ``resume_argv`` if it can resume); it
gets ``~/.cache`` writable, no guard hook (the sandbox is the wall) and no usage parsing.
"""

from __future__ import annotations

from typing import Final

from .base import HostKind


class Command(HostKind):
    name = "command"


KIND: Final = Command()
