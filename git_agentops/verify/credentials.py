"""Which of the person's environment variables are credentials: scrubbed from agents, held against deliveries.

An agent runs with the person's environment (its CLI needs their configuration), and an agent that can read a
variable can publish it: a worker once committed the base64 and gzip of an exported ``GITHUB_TOKEN``, and integration
put them on the target. So every agent starts with that environment **scrubbed** (:func:`scrub`), and only what a
host's ``[hosts.<name>] pass_env`` names comes through (its model's API key: the policy says which, ``policy trust``
shows it). This module is the one place that decides what a credential variable is (:func:`is_credential`):

* by **name**, case-insensitive: it contains one of :data:`NAME_MARKERS` (``TOKEN``, ``SECRET``, ``PASSWORD``,
  ``API_KEY``, ``AUTH`` -- but not ``AUTHOR``, so ``GIT_AUTHOR_NAME`` stays -- ...), or is one of
  :data:`KNOWN_NAMES` (``KUBECONFIG``, ``GPG_AGENT_INFO``: what points at credentials without saying so), or starts
  with one of :data:`KNOWN_PREFIXES`;
* by **value**: it holds what :func:`~git_agentops.verify.redact.find_secrets` calls a secret (a ``ghp_`` token
  under any name), or a URL with a password (``postgres://user:pw@host``).

Verification commands get far less: an allowlist (:data:`git_agentops.process.command.ENV_ALLOWLIST`), none of
whose names is a credential by this rule (a test says so).

The values of every credential variable -- scrubbed, or passed because a host needs it -- are what the supervisor
**holds** (:class:`HeldSecrets`, from at least :data:`MIN_HELD` characters): a delivery that carries one of them,
plainly or encoded, is refused (:mod:`.held`, :mod:`git_agentops.integrate.secrets`). A held value is never shown:
not in a refusal, a log line or a ``repr``; findings name the variable.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from .redact import find_secrets

NAME_MARKERS: Final = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "PRIVATE_KEY",
    "PRIVATEKEY",
    "API_KEY",
    "APIKEY",
    "ACCESS_KEY",
    "ACCESSKEY",
    "SESSION_KEY",
    "COOKIE",
    "AUTH",
)
"""A variable whose upper-cased name contains one of these is a credential (``GITHUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_SESSION_TOKEN``, ``TWINE_PASSWORD``, ``ANTHROPIC_API_KEY``, ``DOCKER_AUTH_CONFIG``, ``SSH_AUTH_SOCK``...).
``AUTH`` followed by ``OR`` counts only as ``AUTHORIZATION``/``AUTHORISATION``: ``GIT_AUTHOR_NAME`` is no secret."""

KNOWN_NAMES: Final = frozenset(
    {"KUBECONFIG", "GPG_AGENT_INFO", "SSH_AGENT_PID", "NETRC", "DOCKER_CONFIG", "BW_SESSION", "PGPASSFILE"}
)
"""Credentials, or where they are, under names that do not say so."""

KNOWN_PREFIXES: Final = ("OP_SESSION_",)
"""1Password's ``OP_SESSION_<account>``."""

MIN_HELD: Final = 8
"""Shorter values are not held: ``true``, a port, a region name would refuse half the deliveries."""

_NAME: Final = re.compile(
    "|".join(re.escape(m) for m in NAME_MARKERS if m != "AUTH") + r"|AUTH(?!OR(?!I[SZ]))",
)
_URL_PASSWORD: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*:[^\s/@]+@")


def is_credential_name(name: str) -> bool:
    """Whether ``name`` says it holds a credential (see the module docstring)."""
    upper = name.upper()
    return upper in KNOWN_NAMES or upper.startswith(KNOWN_PREFIXES) or _NAME.search(upper) is not None


def is_secret_value(value: str) -> bool:
    """Whether ``value`` looks like a secret whatever its name: a secret-shaped string, a URL with a password."""
    return bool(_URL_PASSWORD.search(value)) or bool(find_secrets(value))


def is_credential(name: str, value: str) -> bool:
    """Whether the variable ``name=value`` is a credential: by its name or by its value."""
    return is_credential_name(name) or is_secret_value(value)


def scrub(environ: Mapping[str, str], pass_env: Collection[str] = ()) -> dict[str, str]:
    """``environ`` without its credential variables, except those ``pass_env`` names (exact names)."""
    return {name: value for name, value in environ.items() if name in pass_env or not is_credential(name, value)}


@dataclass(frozen=True, slots=True, repr=False)
class HeldSecrets:
    """The secret values the supervisor holds, each with the name of the variable it came from.

    ``secrets`` is ``(name, value)`` pairs, one per distinct value (the first name in sorted order), values stripped
    and at least :data:`MIN_HELD` characters. The ``repr`` names the variables only.
    """

    secrets: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]]) -> HeldSecrets:
        """Held secrets from ``(name, value)`` pairs: stripped, too short ones dropped, one name per value."""
        by_value: dict[str, str] = {}
        for name, value in sorted(pairs):
            held = value.strip()
            if len(held) >= MIN_HELD and "\0" not in held:
                by_value.setdefault(held, name)
        return cls(tuple(sorted((name, value) for value, name in by_value.items())))

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> HeldSecrets:
        """The values of every credential variable of ``environ`` (scrubbed from agents, or passed to them)."""
        return cls.of((name, value) for name, value in environ.items() if is_credential(name, value))

    @property
    def names(self) -> tuple[str, ...]:
        """The variables held, sorted."""
        return tuple(name for name, _value in self.secrets)

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def __repr__(self) -> str:
        return f"HeldSecrets(names={list(self.names)!r})"


NO_HELD_SECRETS: Final = HeldSecrets()
"""Nothing held: what a scan gets when the caller has no environment to hold secrets from."""
