"""Integration receipts: a signed, sealed record of what one integration did, attached to the commit it made.

A receipt is a DSSE envelope (:mod:`.dsse`) around an in-toto Statement (:mod:`.statement`) whose subject is the
integrated commit and its tree and whose predicate seals every part of the run that led to it; it is signed with
SSH keys and checked against an ``allowed_signers`` file exactly as Git checks SSH-signed commits (:mod:`.sshsig`).
:mod:`.verify` judges one commit's receipt; storing it (a note under ``refs/notes/agentops/receipts``) is
``gitstore``'s job, and walking a range of commits the CLI's.

Why this shape (DESIGN §6): CI can check a receipt with nothing but the repository, ``ssh-keygen`` and the
allowed signers file; the receipt cannot be moved to another commit (subject digests), edited (signature, seals)
or claim a merge history the commit does not have (merge chain vs first-parent ancestry).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from .dsse import Envelope, Signature, dump_envelope, envelope, pae, parse_envelope, sign_envelope
from .shape import StatementDoc
from .sshsig import NAMESPACE, sign
from .statement import (
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    build_predicate,
    build_statement,
    evidence_summary,
    task_record,
)
from .verify import Verdict, verify_receipt

__all__ = [
    "NAMESPACE",
    "PAYLOAD_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "Envelope",
    "Signature",
    "Verdict",
    "build_predicate",
    "build_statement",
    "dump_envelope",
    "envelope",
    "evidence_summary",
    "make_receipt",
    "pae",
    "parse_envelope",
    "sign_envelope",
    "task_record",
    "verify_receipt",
]
# ``sshsig.sign``/``sshsig.verify`` are used through their module: ``verify`` here is the :mod:`.verify` module.


def make_receipt(statement: StatementDoc, *, keys: Sequence[Path] = (), ssh_keygen: str = "ssh-keygen") -> bytes:
    """The receipt note for ``statement``: its envelope signed with each of ``keys`` (none: unsigned), as bytes.

    Raises ``RECEIPT_SIGNING_FAILED`` when a key cannot sign.
    """
    signers = [functools.partial(sign, key=key, ssh_keygen=ssh_keygen) for key in keys]
    return dump_envelope(sign_envelope(statement, signers))
