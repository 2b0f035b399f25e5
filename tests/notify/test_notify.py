"""Notifications: every notifiable event of a run's committed journal reaches each subscribed command once, in order,
through failures and restarts; a bad configuration is a coded error; a notifier never holds the run up."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from git_agentops import eventkinds as kinds
from git_agentops.clock import SystemClock
from git_agentops.errors import AgentOpsError
from git_agentops.gitstore.journal import Change, Event
from git_agentops.gitstore.refs import read_ref
from git_agentops.gitstore.repo import open_store
from git_agentops.notify.config import config_path, load_notify
from git_agentops.notify.deliver import Notifier
from git_agentops.notify.record import Kind, NotifyConfig, kind_of
from git_agentops.runs import state as runstate

from ..helpers import simple_child
from ..runkit import project, recipe, start, wait_for, wait_supervisor_gone

# records each notification's id; every 5th attempt fails (a counter file makes it deterministic)
FLAKY = r"""
n=$(cat "$1/count" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$1/count"
doc=$(cat)
[ $((n % 5)) -eq 0 ] && exit 1
printf '%s\n' "$doc" | grep -o '"id": "[^"]*"' >> "$1/got"
"""


def _config(out: Path, **more: Any) -> NotifyConfig:
    (out / "flaky.sh").write_text(FLAKY)
    return NotifyConfig.from_doc(
        {"commands": [{"argv": ["sh", str(out / "flaky.sh"), str(out)], **more}], "retries": 3, "backoff": 0.01},
        source="test",
    )


def _run_with_events(tmp_path: Path, count: int) -> tuple[Path, str, list[str]]:
    """A run created for real, then ``count`` notifiable events appended to its journal; their commits in order."""
    repo = project(tmp_path)
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    wait_for(repo, run_id, lambda d: d["status"] in ("complete", "blocked"), timeout=180)
    wait_supervisor_gone(repo, run_id)
    store = open_store(repo, clock=SystemClock())
    journal = runstate.journal(store, run_id)

    commits = []
    for index in range(count):
        data = {"workerId": f"w{index}", "code": "RUN_NO_PROGRESS", "reason": f"blocked {index}"}
        runstate.mutate(journal, _marker(f"event {index}"), Event(kinds.WORKER_BLOCKED, f"task {index} blocked", data))
        commits.append(_tip(store, run_id))
    return repo, run_id, commits


def _marker(text: str) -> Any:
    def mark(change: Change, view: runstate.RunView) -> None:
        change.put_artifact(text.encode())  # a state change of its own: one journal commit per event

    return mark


def _tip(store: Any, run_id: str) -> str:
    tip = read_ref(store, runstate.journal(store, run_id).ref)
    assert tip is not None
    return tip


def _notifier(store: Any, run_id: str, config: NotifyConfig, log: Any = print) -> Notifier:
    run_dir = runstate.run_dir(store, run_id)
    return Notifier(store, run_id, config, run_dir=run_dir, environ=os.environ, clock=SystemClock(), log=log)


def test_invariant_500_events_500_notifications_none_twice_none_lost_in_order(tmp_path: Path) -> None:
    repo, run_id, commits = _run_with_events(tmp_path, 500)
    out = tmp_path / "out"
    out.mkdir()
    store = open_store(repo, clock=SystemClock())
    run_dir = runstate.run_dir(store, run_id)
    notifier = Notifier(
        store, run_id, _config(out), run_dir=run_dir, environ=os.environ, clock=SystemClock(), log=print
    )
    notifier.poll()
    deadline = time.monotonic() + 300
    while notifier.queue:
        assert time.monotonic() < deadline, f"{len(notifier.queue)} notifications never delivered"
        notifier.deliver_due()
        time.sleep(0.005)
    got = [line.split('"')[3] for line in (out / "got").read_text().splitlines()]
    blocked = [g for g in got if g.endswith(":blocked")]
    assert blocked == [f"{c}:blocked" for c in commits]  # each once, none lost, in journal order
    assert int((out / "count").read_text()) > len(got)  # failures happened and were retried
    again = _notifier(store, run_id, _config(out))
    assert again.poll() == 0 and again.queue == []  # a restarted notifier queues nothing twice


def test_a_restart_goes_on_from_the_cursor(tmp_path: Path) -> None:
    repo, run_id, commits = _run_with_events(tmp_path, 6)
    out = tmp_path / "out"
    out.mkdir()
    store = open_store(repo, clock=SystemClock())
    config = NotifyConfig.from_doc(
        {"commands": [{"argv": ["sh", "-c", f"cat >> {out}/all"], "events": ["blocked"]}]}, source="t"
    )
    first = _notifier(store, run_id, config)
    first.poll()
    first.deliver_due()
    store2 = open_store(repo, clock=SystemClock())
    journal = runstate.journal(store2, run_id)
    runstate.mutate(
        journal,
        _marker("one more"),
        Event(kinds.WORKER_BLOCKED, "one more", {"workerId": "w", "code": "C", "reason": "r"}),
    )
    second = _notifier(store2, run_id, config)
    assert second.poll() == 1
    second.deliver_due()
    ids = [json.loads(line)["id"] for line in (out / "all").read_text().splitlines()]
    assert ids == [f"{c}:blocked" for c in [*commits, _tip(store2, run_id)]]


def test_a_hanging_notifier_never_holds_the_run_and_is_given_up(tmp_path: Path) -> None:
    repo, run_id, _ = _run_with_events(tmp_path, 1)
    store = open_store(repo, clock=SystemClock())
    config = NotifyConfig.from_doc(
        {"commands": [{"argv": ["sleep", "60"], "timeout": 0.2, "events": ["blocked"]}], "retries": 1, "backoff": 0.01},
        source="t",
    )
    said: list[str] = []
    notifier = _notifier(store, run_id, config, said.append)
    began = time.monotonic()
    notifier.start()
    deadline = time.monotonic() + 30
    while not any("gave up" in s for s in said):
        assert time.monotonic() < deadline, said
        time.sleep(0.05)
    notifier.stop()
    assert time.monotonic() - began < 20
    assert any("timed out" in s for s in said)
    assert not [t for t in threading.enumerate() if t.name == "agentops-notify"]


def test_a_real_run_notifies_its_completion_once(tmp_path: Path) -> None:
    out = tmp_path / "got.jsonl"
    path = config_path(os.environ)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'[notify]\n[[notify.commands]]\nargv = ["sh", "-c", "cat >> {out}"]\nevents = ["complete"]\n')
    repo = project(tmp_path)
    run_id = start(repo, recipe(tmp_path, simple_child("a", "src/a.txt"), finalize=True))
    wait_for(repo, run_id, lambda d: d["status"] == "complete", timeout=180)
    wait_supervisor_gone(repo, run_id)
    docs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(d["kind"], d["runId"], d["event"]["code"]) for d in docs] == [("complete", run_id, "RUN_COMPLETE")]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("[notify]\nnoise = 1\n", "unknown key"),
        ("[notify]\nretries = -1\n", ".retries"),
        ("[notify]\n[[notify.commands]]\nargv = []\n", ".argv"),
        ("[notify]\n[[notify.commands]]\nargv = ['x']\nformat = 'sms'\n", ".format"),
        ("[notify]\n[[notify.commands]]\nargv = ['x']\nevents = ['lunch']\n", ".events"),
        ("[notify]\n[[notify.commands]]\nargv = ['x']\ntimeout = 0\n", ".timeout"),
        ("notify = 3\n", "must be a table"),
        ("[notify\n", "not TOML"),
    ],
)
def test_a_bad_notify_configuration_is_a_coded_error(text: str, where: str) -> None:
    path = config_path(os.environ)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    with pytest.raises(AgentOpsError) as caught:
        load_notify(os.environ)
    assert caught.value.code == "NOTIFY_CONFIG_INVALID" and where in caught.value.message


def test_the_kinds_come_from_the_events_a_person_acts_on() -> None:
    assert kind_of("RUN_AWAITING_INPUT", {}) is Kind.QUESTION
    assert kind_of("RUN_POLICY_PENDING", {}) is Kind.APPROVAL
    assert kind_of("RUN_STATUS", {"status": "budget-limited"}) is Kind.BUDGET
    assert kind_of("RUN_STATUS", {"status": "blocked"}) is Kind.RUN_BLOCKED
    assert kind_of("RUN_STATUS", {"status": "active"}) is None
    assert kind_of("WORKER_STARTED", {}) is None
    desktop = NotifyConfig.from_doc({"commands": [{"format": "desktop"}]}, source="t").commands[0]
    assert desktop.argv == ("notify-send",) and desktop.wants(Kind.COMPLETE)
