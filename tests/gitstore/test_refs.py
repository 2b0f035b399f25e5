"""Ref compare-and-swap: create-only is race-safe, a mismatch never overwrites, batches are all-or-nothing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.refnames import check_component, ref_name_problem
from git_agentops.gitstore.refs import (
    RefConflict,
    RefUpdate,
    create_ref,
    list_refs,
    read_ref,
    update_ref,
    update_refs,
)
from git_agentops.gitstore.repo import Store

from ..conftest import git
from .test_journal import _start_workers


def _commit(store: Store, message: str) -> str:
    sig = store.signature()
    tree = store.repo.TreeBuilder().write()
    return str(store.repo.create_commit(None, sig, sig, message, tree, []))


def test_update_ref_is_compare_and_swap(store: Store, repo_path: Path) -> None:
    a, b, c = (_commit(store, m) for m in "abc")
    name = "refs/agentops/test/x"
    update_ref(store, name, a, None, "create")
    assert read_ref(store, name) == a
    with pytest.raises(RefConflict) as caught:
        update_ref(store, name, b, None, "create again")  # must not exist
    assert (caught.value.expected, caught.value.actual) == (None, a)
    with pytest.raises(RefConflict) as stale:
        update_ref(store, name, c, b, "stale expectation")
    assert stale.value.code == "REF_CONFLICT" and stale.value.actual == a and stale.value.expected == b
    assert read_ref(store, name) == a
    update_ref(store, name, b, a, "move")
    assert git(repo_path, "rev-parse", name) == b
    update_ref(store, name, None, b, "delete")
    assert read_ref(store, name) is None
    with pytest.raises(RefConflict):
        update_ref(store, name, None, b, "delete twice")


def test_git_cli_move_between_read_and_write_is_a_conflict_not_an_overwrite(store: Store, repo_path: Path) -> None:
    a, b, c = (_commit(store, m) for m in "abc")
    name = "refs/agentops/test/y"
    update_ref(store, name, a, None, "create")
    seen = read_ref(store, name)
    git(repo_path, "update-ref", name, b, a)  # another writer, through git
    with pytest.raises(RefConflict):
        update_ref(store, name, c, seen, "based on a stale read")
    assert git(repo_path, "rev-parse", name) == b


def test_batch_is_all_or_nothing(store: Store, repo_path: Path) -> None:
    a, b = _commit(store, "a"), _commit(store, "b")
    update_ref(store, "refs/agentops/t/one", a, None, "seed")
    updates = [
        RefUpdate("refs/agentops/t/one", b, a),
        RefUpdate("refs/agentops/t/two", b, None),
        RefUpdate("refs/agentops/t/three", b, a),  # wrong: three does not exist
    ]
    with pytest.raises(RefConflict) as caught:
        update_refs(store, updates, "batch")
    assert caught.value.name == "refs/agentops/t/three"
    assert read_ref(store, "refs/agentops/t/one") == a
    assert read_ref(store, "refs/agentops/t/two") is None
    update_refs(store, updates[:2], "batch")
    assert read_ref(store, "refs/agentops/t/one") == b == read_ref(store, "refs/agentops/t/two")
    assert list_refs(store, "refs/agentops/t/") == {"refs/agentops/t/one": b, "refs/agentops/t/two": b}
    git(repo_path, "fsck", "--strict")


def test_batch_with_a_locked_ref_writes_nothing_and_reports_ref_locked(store: Store) -> None:
    a, b = _commit(store, "a"), _commit(store, "b")
    update_ref(store, "refs/agentops/t/free", a, None, "seed")
    lock = store.common_dir / "refs/agentops/t/busy.lock"
    lock.write_text("")
    try:
        with pytest.raises(AgentOpsError) as caught:
            update_refs(
                store,
                [RefUpdate("refs/agentops/t/free", b, a), RefUpdate("refs/agentops/t/busy", b, None)],
                "batch",
                lock_timeout=0.2,
            )
        assert caught.value.code == "REF_LOCKED" and "busy.lock" in caught.value.message
    finally:
        lock.unlink()
    assert read_ref(store, "refs/agentops/t/free") == a
    assert not (store.common_dir / "refs/agentops/t/free.lock").exists()  # our own locks were released


def test_update_ref_refuses_missing_objects_and_symbolic_refs(store: Store, repo_path: Path) -> None:
    with pytest.raises(AgentOpsError) as missing:
        update_ref(store, "refs/agentops/t/m", "1" * 40, None, "x")
    assert missing.value.code == "OBJECT_MISSING"
    with pytest.raises(AgentOpsError) as short:
        update_ref(store, "refs/agentops/t/m", "abc", None, "x")
    assert short.value.code == "OBJECT_MISSING"
    git(repo_path, "symbolic-ref", "refs/agentops/t/sym", "refs/heads/main")
    with pytest.raises(AgentOpsError) as sym:
        update_ref(store, "refs/agentops/t/sym", _commit(store, "a"), None, "x")
    assert sym.value.code == "REF_SYMBOLIC"


INVALID_NAMES = [
    "refs/heads/a..b",
    "refs/heads/x@{y",
    "refs/heads/foo.lock",
    "refs/heads/a\x01b",
    "refs/heads//x",
    "refs/heads/x/",
    "refs/heads/.hidden",
    "refs/heads/sp ace",
    "refs/heads/til~de",
    "refs/heads/ca^ret",
    "refs/heads/co:lon",
    "refs/heads/q?",
    "refs/heads/st*r",
    "refs/heads/br[acket",
    "refs/heads/back\\slash",
    "refs/heads/dot.",
    "refs/heads/del\x7f",
    "",
    "heads/no-refs-prefix",
    "refs/heads/x.lock/y",
]


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_invalid_ref_names_are_refused_and_nothing_is_written(store: Store, repo_path: Path, name: str) -> None:
    before = git(repo_path, "for-each-ref")
    with pytest.raises(AgentOpsError) as caught:
        update_ref(store, name, _commit(store, "a"), None, "x")
    assert caught.value.code == "REF_NAME_INVALID"
    assert git(repo_path, "for-each-ref") == before


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=st.text(alphabet=st.sampled_from(list("ab./-_@{}~^:?*[\\ .lock\x01")), min_size=1, max_size=12))
def test_ref_name_rules_agree_with_git_check_ref_format(tail: str) -> None:
    """Differential: our validator and ``git check-ref-format`` accept exactly the same names."""
    name = "refs/x/" + tail
    ours = ref_name_problem(name) is None
    theirs = subprocess.run(["git", "check-ref-format", name], capture_output=True, check=False).returncode == 0
    assert ours == theirs, (name, ref_name_problem(name))
    assert ours == pygit2.reference_is_valid_name(name) or "@" in tail  # libgit2 differs only around '@'


@pytest.mark.parametrize("value", ["", "-x", "a/b", "a..b", "x.lock", "a b", "ü", "a" * 129, "dot."])
def test_ref_components_are_strict(value: str) -> None:
    with pytest.raises(AgentOpsError) as caught:
        check_component(value, "run id")
    assert caught.value.code == "REF_NAME_INVALID"


@pytest.mark.slow
def test_four_processes_racing_for_500_create_only_refs_each_ref_claimed_once(store: Store, repo_path: Path) -> None:
    """Invariant: create-only is race-safe -- every ref is claimed by exactly one process (no double claims)."""
    results = _start_workers("claim", repo_path, 4, 500, "refs/agentops/claims/t")
    owner: dict[str, str] = {}
    for result in results:
        for name in result["claimed"]:  # type: ignore[attr-defined]
            assert name not in owner, f"{name} claimed twice"
            owner[name] = result["commit"]  # type: ignore[assignment]
    assert len(owner) == 500
    refs = list_refs(store, "refs/agentops/claims/")
    assert refs == owner  # and each ref points at its claimer's commit
    assert create_ref(store, "refs/agentops/claims/t0000", _commit(store, "late"), "late") is False


def test_the_store_keeps_the_namespace_rules_the_hooks_enforce(store: Store) -> None:
    """Hooks are advisory (--no-verify, libgit2 skip them): the store's own writes obey the same rules."""
    sig = store.signature()
    tree = store.repo.TreeBuilder().write()
    first = str(store.repo.create_commit(None, sig, sig, "1", tree, []))
    second = str(store.repo.create_commit(None, sig, sig, "2", tree, [pygit2.Oid(hex=first)]))
    delivery, state = "refs/agentops/runs/r1/deliveries/t1", "refs/agentops/runs/r1/state"
    update_ref(store, delivery, first, None, "deliver")
    for new in (second, None):
        with pytest.raises(AgentOpsError) as moved:
            update_ref(store, delivery, new, first, "rewrite")
        assert moved.value.code == "HOOK_REF_CREATE_ONLY"
    update_ref(store, state, second, None, "state")
    with pytest.raises(AgentOpsError) as back:
        update_ref(store, state, first, second, "rewind")
    assert back.value.code == "HOOK_REF_FAST_FORWARD_ONLY"
    with pytest.raises(AgentOpsError) as gone:
        update_refs(store, [RefUpdate(state, None, second)], "delete")
    assert gone.value.code == "HOOK_REF_DELETE"
    assert read_ref(store, delivery) == first and read_ref(store, state) == second
    update_ref(store, "refs/agentops/runs/r1/candidate", first, None, "candidate")
    update_ref(store, "refs/agentops/runs/r1/candidate", None, first, "candidates may go")  # not a linear ref
