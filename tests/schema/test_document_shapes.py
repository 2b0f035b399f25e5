"""The typed dictionaries that declare a document's shape say what its JSON Schema says.

A document that stays JSON (a receipt, a worker's instructions, a recipe) is read through a ``TypedDict`` once its
schema has checked it, so the type checker holds its readers to the declared keys. Those declarations are only
worth it while they agree with the schema: a key the schema adds or drops, or a key that becomes optional, must
show here before a reader trusts a key that is not there.
"""

from __future__ import annotations

import json
from typing import Any, ForwardRef

import pytest

from git_agentops.hosts import recipe
from git_agentops.model import instructionsdoc, run
from git_agentops.receipts import shape
from git_agentops.resources import data_dir


def _schema(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((data_dir("schemas") / f"{name}.schema.json").read_text("utf-8"))
    return doc


def _at(doc: dict[str, Any], *path: str) -> dict[str, Any]:
    """The object schema at ``path`` (following ``items``, ``else`` and local ``$ref``s as the path names them)."""
    node = doc
    for step in path:
        node = node[step]
        while "$ref" in node and node["$ref"].startswith("#/"):
            node = _at(doc, *node["$ref"][2:].split("/"))
    return node


def _keys(cls: type) -> tuple[set[str], set[str]]:
    """(required, optional) keys a TypedDict declares. Read from the annotations' text: with postponed annotations
    Python 3.11 cannot tell ``NotRequired`` keys at run time (``__required_keys__`` lists them all)."""
    annotations: dict[str, Any] = {}
    for base in reversed(cls.__mro__):
        annotations.update(getattr(base, "__annotations__", {}))
    total = getattr(cls, "__total__", True)
    text = {k: v.__forward_arg__ if isinstance(v, ForwardRef) else str(v) for k, v in annotations.items()}
    optional = {k for k, v in text.items() if not total or v.startswith("NotRequired[")}
    return set(annotations) - optional, optional


def _schema_keys(node: dict[str, Any]) -> tuple[set[str], set[str]]:
    required = set(node.get("required", ()))
    return required, set(node["properties"]) - required


PREDICATE = _schema("receipt-predicate")
STATEMENT = _schema("in-toto-statement")
ENVELOPE = _schema("dsse-envelope")
INSTRUCTIONS = _schema("instructions")
TASK = _schema("task")
RECIPE = _schema("recipe")
RUN = _schema("run")
WORKER = _schema("worker")

SHAPES = [
    (shape.EnvelopeDoc, ENVELOPE, ()),
    (shape.SignatureDoc, ENVELOPE, ("properties", "signatures", "items")),
    (shape.StatementDoc, STATEMENT, ()),
    (shape.SubjectDoc, STATEMENT, ("properties", "subject", "items")),
    (shape.SubjectDigestDoc, STATEMENT, ("properties", "subject", "items", "properties", "digest")),
    (shape.PredicateDoc, PREDICATE, ()),
    (shape.SealDoc, PREDICATE, ("properties", "goal")),
    (shape.PolicyDoc, PREDICATE, ("properties", "policy", "properties", "value")),
    (shape.TransitionDoc, PREDICATE, ("$defs", "transition")),
    (shape.TaskDoc, PREDICATE, ("$defs", "task")),
    (shape.DeliveryDoc, PREDICATE, ("$defs", "delivery")),
    (shape.EvidenceDoc, PREDICATE, ("$defs", "evidence")),
    (shape.IntegrationDoc, PREDICATE, ("$defs", "integration")),
    (shape.StepDoc, PREDICATE, ("$defs", "integration", "properties", "steps", "items")),
    (shape.ReviewDoc, PREDICATE, ("$defs", "review")),
    (instructionsdoc.InstructionsDoc, INSTRUCTIONS, ()),
    (instructionsdoc.TaskEntryDoc, INSTRUCTIONS, ("properties", "tasks", "items")),
    (instructionsdoc.AnswerDoc, INSTRUCTIONS, ("properties", "answers", "items")),
    (instructionsdoc.PolicyEntryDoc, INSTRUCTIONS, ("properties", "policy")),
    (instructionsdoc.TransitionEntryDoc, INSTRUCTIONS, ("properties", "policy", "properties", "transitions", "items")),
    (instructionsdoc.AssignedTaskDoc, TASK, ()),
    (run.RunDoc, RUN, ()),
    (run.BudgetDoc, RUN, ("properties", "budget")),
    (run.IntervalDoc, RUN, ("properties", "budget", "properties", "intervals", "items")),
    (run.WorkerDoc, WORKER, ()),
    (run.FailureDoc, WORKER, ("properties", "failures", "items")),
    (recipe.RecipeDoc, RECIPE, ()),
    (recipe.PlanDoc, RECIPE, ("properties", "plan")),
    (recipe.CoordinatorDoc, RECIPE, ("properties", "coordinator")),
    (recipe.PolicyChangeDoc, RECIPE, ("properties", "coordinator", "properties", "policy")),
    (
        recipe.ApprovalDoc,
        RECIPE,
        ("properties", "coordinator", "properties", "policy", "properties", "approvals", "items"),
    ),
    (recipe.ReplanDoc, RECIPE, ("properties", "coordinator", "properties", "policy", "properties", "replan", "items")),
    (recipe.TaskDoc, RECIPE, ("properties", "tasks", "items")),
    (recipe.AttemptDoc, RECIPE, ("properties", "tasks", "items", "properties", "attempts", "items")),
    (recipe.StepDoc, RECIPE, ("$defs", "step")),
    (recipe.CriterionDoc, RECIPE, ("$defs", "criterion", "else")),
    (recipe.ReviewerDoc, RECIPE, ("properties", "reviewers", "items")),
    (recipe.FindingDoc, RECIPE, ("properties", "reviewers", "items", "properties", "findings", "items")),
]


@pytest.mark.parametrize(("declared", "schema", "path"), SHAPES, ids=[cls.__name__ for cls, _, _ in SHAPES])
def test_typed_document_declares_exactly_the_schemas_keys_and_which_are_required(
    declared: type, schema: dict[str, Any], path: tuple[str, ...]
) -> None:
    assert _keys(declared) == _schema_keys(_at(schema, *path))


def test_the_key_reader_tells_optional_keys_from_required_ones() -> None:
    """The comparison above is only as good as :func:`_keys`: it must see ``NotRequired`` and ``total=False``."""
    assert _keys(shape.DeliveryDoc) == (
        {"taskId", "workerId", "generation", "sourceCommit", "deliveryDigest"},
        {"evidence", "sandbox"},
    )
    required, optional = _keys(recipe.StepDoc)
    assert not required and {"write", "run", "exit"} <= optional
