"""Host kinds: one module each behind one interface; what each writes into an agent's private HOME; partial usage."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from git_agentops.model.hosts import kind_of, registry
from git_agentops.model.hosts.base import HostKind
from git_agentops.resources import data_dir
from git_agentops.sandbox.home import prepare_home
from git_agentops.sandbox.plan import for_worker

HOOK = "/usr/bin/python3 -I -m git_agentops.cli.hook"


def test_every_kind_is_a_module_and_the_policy_schema_lists_exactly_them() -> None:
    """Invariant: adding a host is adding a module; the schema's ``kind`` enum follows the registry."""
    schema = json.loads((data_dir("schemas") / "policy.schema.json").read_text())
    enum = schema["$defs"]["host"]["properties"]["kind"]["enum"]
    assert sorted(enum) == sorted(registry())
    for name, kind in registry().items():
        assert isinstance(kind, HostKind) and kind.name == name
        assert kind_of(name) is kind
    assert kind_of("no-such-kind") is registry()["command"]


def _person(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "person"
    (home / ".codex").mkdir(parents=True)
    (home / ".codex" / "config.toml").write_text(
        'model = "mock-model"\nmodel_provider = "mock"\nnotify = ["/bin/evil"]\nsandbox_mode = "danger-full-access"\n'
        '[features]\nhooks = false\n[model_providers.mock]\nname = "mock"\nbase_url = "http://127.0.0.1:9/v1"\n'
        'env_key = "MOCK_KEY"\nwire_api = "responses"\n[projects."/elsewhere"]\ntrust_level = "trusted"\n'
        "[hooks]\nPreToolUse = []\n"
    )
    (home / ".codex" / "auth.json").write_text('{"OPENAI_API_KEY": "sk-person"}')
    (home / ".config" / "opencode").mkdir(parents=True)
    (home / ".config" / "opencode" / "opencode.jsonc").write_text(
        '// mine\n{"provider": {"mock": {"npm": "@ai-sdk/openai-compatible"}}, "model": "mock/m",\n'
        ' "plugin": ["evil"], "permission": {"bash": "allow"}}\n'
    )
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").write_text(
        json.dumps({"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}, "disableAllHooks": True, "hooks": {}})
    )
    return {"HOME": str(home), "PATH": os.environ.get("PATH", "")}


def test_codex_gets_a_home_of_its_own_with_the_persons_provider_and_our_guard(tmp_path: Path) -> None:
    """Invariant: Codex reads its guard from the agent's own CODEX_HOME (a linked worktree's ``.codex/`` is never
    read); the person's model provider reaches it, and nothing of theirs that could turn hooks off or run a
    program (``notify``) or widen the sandbox does."""
    environ = _person(tmp_path)
    home, worktree = tmp_path / "agent-home", tmp_path / "wt"
    prepare_home(
        home, kind="codex", home_files=("~/.codex/auth.json",), environ=environ, worktree=worktree, hook_command=HOOK
    )
    config = tomllib.loads((home / ".codex" / "config.toml").read_text())
    assert config["model_provider"] == "mock" and config["model_providers"]["mock"]["wire_api"] == "responses"
    assert config["features"] == {"hooks": True}
    assert config["projects"] == {str(worktree): {"trust_level": "trusted"}}
    assert not {"notify", "sandbox_mode", "hooks"} & set(config)
    hooks = json.loads((home / ".codex" / "hooks.json").read_text())
    group = hooks["hooks"]["PreToolUse"][0]
    assert group["matcher"] == "Bash" and group["hooks"][0]["command"] == f"{HOOK} agent-command --host codex"
    assert (home / ".codex" / "auth.json").read_text() == '{"OPENAI_API_KEY": "sk-person"}'
    assert kind_of("codex").config_env(str(home)) == {"CODEX_HOME": str(home / ".codex")}


def test_opencode_and_claude_get_the_persons_model_settings_without_plugins_permissions_or_hooks(
    tmp_path: Path,
) -> None:
    environ = _person(tmp_path)
    for kind in ("opencode", "claude"):
        home = tmp_path / f"home-{kind}"
        prepare_home(home, kind=kind, home_files=(), environ=environ, worktree=tmp_path / "wt", hook_command=HOOK)
        if kind == "opencode":
            doc = json.loads((home / ".config" / "opencode" / "opencode.json").read_text())
            assert doc == {"provider": {"mock": {"npm": "@ai-sdk/openai-compatible"}}, "model": "mock/m"}
        else:
            doc = json.loads((home / ".claude" / "settings.json").read_text())
            assert doc == {"env": {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9"}}


def test_opencode_runs_without_a_session_title_or_snapshots() -> None:
    """Invariant: init's opencode config turns off the title request (a model request per session that opencode never
    reports) and the per-step snapshots of the worktree (the TUI's undo): a headless generation needs neither."""
    doc = json.loads(kind_of("opencode").default_env([["make", "test"]])["OPENCODE_CONFIG_CONTENT"])
    assert doc["snapshot"] is False and doc["agent"] == {"title": {"disable": True}}
    assert doc["permission"]["bash"]["make test"] == "allow"


def test_a_symlink_the_agent_planted_in_its_home_never_reaches_the_persons_files(tmp_path: Path) -> None:
    """Invariant: preparing an agent's HOME follows nothing the agent left there: a ``.codex`` (or a settings file)
    made a symlink to the person's own is unlinked, and the person's files are neither removed nor written."""
    environ = _person(tmp_path)
    person_codex = Path(environ["HOME"]) / ".codex"
    before = {p.name: p.read_bytes() for p in person_codex.iterdir()}
    home = tmp_path / "agent-home"
    home.mkdir()
    (home / ".codex").symlink_to(person_codex)
    (home / ".claude").mkdir()
    (home / ".claude" / "settings.json").symlink_to(Path(environ["HOME"]) / ".claude" / "settings.json")
    for kind in ("claude", "codex"):  # each start clears every kind's settings: codex's are what is left
        prepare_home(
            home, kind=kind, home_files=("~/.codex/auth.json",), environ=environ, worktree=home, hook_command=HOOK
        )
    assert {p.name: p.read_bytes() for p in person_codex.iterdir()} == before
    assert not (home / ".codex").is_symlink() and (home / ".codex" / "hooks.json").is_file()
    assert "disableAllHooks" in (Path(environ["HOME"]) / ".claude" / "settings.json").read_text()


def _unsandboxed(tmp_path: Path, admin: Path, kind: str, environ: dict[str, str]) -> dict[str, str]:
    """The environment a ``kind`` agent gets at sandbox level ``none``."""
    sandbox = for_worker(
        mode="none",
        reason="off for this test",
        worktree=tmp_path / "wt",
        admin_dir=admin,
        common_dir=tmp_path / "repo.git",
        environ=environ,
        signing_key=None,
        host_writable=(),
        policy_writable=(),
        deny_read=(),
        recipe=None,
        home_files=("~/.codex/auth.json",),
        kind=kind,
        hook_command=HOOK,
    )
    return sandbox.environment(environ)


def test_without_our_sandbox_codex_still_reads_a_codex_home_of_its_own(tmp_path: Path) -> None:
    """Invariant: at sandbox level ``none`` the agent keeps the person's HOME, but Codex's settings (and our guard)
    come from a CODEX_HOME in the worker's admin dir -- never the person's ``~/.codex``."""
    environ = _person(tmp_path)
    (tmp_path / "wt").mkdir()
    env = _unsandboxed(tmp_path, tmp_path / "admin", "codex", environ)
    assert env["HOME"] == environ["HOME"] and env["CODEX_HOME"] == str(tmp_path / "admin" / "agentops-home" / ".codex")
    assert "agent-command --host codex" in (Path(env["CODEX_HOME"]) / "hooks.json").read_text()
    assert "CODEX_HOME" not in _unsandboxed(tmp_path, tmp_path / "admin2", "claude", environ)


def test_a_generation_stopped_before_its_host_printed_usage_is_partial() -> None:
    """Invariant: each kind says ``partial`` when its output shows work whose usage it never printed."""
    claude = kind_of("claude")
    message = {"id": "m1", "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 3}}
    stopped: list[dict[str, Any]] = [
        {"type": "system", "session_id": "s1"},
        {"type": "assistant", "message": message},
        {"type": "assistant", "message": message},  # one message, two content blocks: counted once
    ]
    report = claude.parse(stopped)
    assert report is not None and report.partial and (report.input_tokens, report.output_tokens) == (15, 3)
    assert report.cost_usd is None and report.reported_usage
    finished = claude.parse([*stopped, {"type": "result", "usage": {"input_tokens": 15, "output_tokens": 3}}])
    assert finished is not None and not finished.partial
    codex = kind_of("codex")
    turn = [{"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"}]
    assert codex.parse(turn) is not None and codex.parse(turn).partial  # type: ignore[union-attr]
    done = codex.parse([*turn, {"type": "turn.completed", "usage": {"input_tokens": 7, "output_tokens": 2}}])
    assert done is not None and not done.partial and (done.input_tokens, done.output_tokens) == (7, 2)
    opencode = kind_of("opencode")
    step: dict[str, Any] = {"type": "step_finish", "part": {"tokens": {"input": 4, "output": 1}, "cost": 0.5}}
    two_steps: list[dict[str, Any]] = [{"type": "step_start"}, step, {"type": "step_start"}]
    cut = opencode.parse(two_steps)
    assert cut is not None and cut.partial and (cut.input_tokens, cut.cost_usd) == (4, 0.5)
    whole = opencode.parse([*two_steps, step])
    assert whole is not None and not whole.partial and whole.input_tokens == 8


def test_a_resumed_codex_session_is_charged_only_what_its_generation_added() -> None:
    """Invariant: ``codex exec resume`` prints the thread's running total in ``turn.completed``; the generation is
    charged that total less what the session's earlier generations were charged (measured: 97642 printed after
    58366 = 39276 served)."""
    from types import SimpleNamespace

    from git_agentops.model.usage import Usage
    from git_agentops.supervisor.usage import account

    def turn(tokens_in: int, tokens_out: int) -> str:
        events = [
            {"type": "thread.started", "thread_id": "t-1"},
            {"type": "turn.started"},
            {"type": "turn.completed", "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out}},
        ]
        return "\n".join(json.dumps(e) for e in events)

    first = Usage(1, 58366, 401, None, session="t-1")
    worker = SimpleNamespace(worker_id="w1", host="codex", generation=2, session="t-1", usage=(first,))
    changes = account("codex", worker, turn(97642, 556), lambda *_: None)  # type: ignore[arg-type]
    assert changes["usage"][-1] == Usage(2, 39276, 155, None, session="t-1")
    other = SimpleNamespace(worker_id="w1", host="codex", generation=2, session=None, usage=(first,))
    fresh = account("codex", other, turn(97642, 556).replace("t-1", "t-2"), lambda *_: None)  # type: ignore[arg-type]
    assert fresh["usage"][-1] == Usage(2, 97642, 556, None, session="t-2")  # a new session owes nothing earlier
    claude = [{"type": "result", "session_id": "t-1", "usage": {"input_tokens": 10, "output_tokens": 2}}]
    once = account("claude", worker, json.dumps(claude[0]), lambda *_: None)  # type: ignore[arg-type]
    assert once["usage"][-1] == Usage(2, 10, 2, None, session="t-1")  # claude reports the turn itself
