"""The real agent CLIs complete runs, against a mock model server on 127.0.0.1.

Why: the stand-ins (``tests/standins``) are shaped like the CLIs as we understood them; these tests run the CLIs
themselves -- the exact versions ``tests/realcli/package-lock.json`` pins, installed once into a cache by
``tests/realcli/install.py``, and aider's pinned ``aider-chat`` by ``tests/realcli/aider_install.py`` -- so an argv,
a sandbox, a hook, a session file or an output format that changed under us fails here, in CI, not in a person's
run. The model is ``tests/realcli/mockmodel.py``: the stand-ins' fake model, replayed over each CLI's own API, which
also keeps a ledger of the usage it reported.

Each CLI is set up as a person sets it up -- its model endpoint in the environment or in its config file in the
(temporary) HOME -- and the policy is exactly what ``git agentops-init`` writes with only that CLI on PATH:

* a whole run completes, a child's guard refuses a destructive command (the refusal is in its host log; aider has
  no hooks and gets no guard, so its children are never made to try one), the usage of every worker generation and
  reviewer and the run's token total are exactly what the model reported, and no process of the run is left --
  and in the same run, its supervisor killed while that child waits on the model (on the request that carries the
  refusal) is resumed, the child continues its session as generation 2, and the run completes (one run for both:
  they built the same state; the usage check then also covers a kill and a resumed session);
* (codex, opencode) a ``max_tokens`` just above the first generation's use stops the run ``budget-limited`` after
  the generation that crossed it, with every generation's usage in ``git agentops-run status --json``.

Against the newest published CLIs instead of the pinned ones::

    python -m tests.realcli.install --latest
    python -m tests.realcli.aider_install --latest
    AGENTOPS_REALCLI_LATEST=1 python -m pytest tests/hosts/test_realcli.py
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from git_agentops.hooks.hostconfig import contents as guard_contents

from ..conftest import git, make_repo
from ..realcli import aider_install, install
from ..realcli.mockmodel import Asked, Hold, MockModel, Usage, fixed_usage, usage_by_size
from ..runkit import events, peek, status, stop, supervisor_log, supervisor_pid, supervisor_running, wait_for

GOAL = 'Write files: alpha.txt says "alpha"; beta.txt says "beta" after alpha.txt'
ONE_CHILD = 'Write files: alpha.txt says "alpha"'
CHECK = """import pathlib, sys
bad = [p.name for p in pathlib.Path(".").glob("*.txt") if "BAD" in p.read_text()]
print("checked; bad:", bad)
sys.exit(1 if bad else 0)
"""
MAKEFILE = "test:\n\tpython3 check.py\n"
PROBE = "git reset --hard"
"""What each child tries first: a command the agent guard refuses (harmless if it ran: nothing is uncommitted yet)."""
REFUSAL = "discards uncommitted work"
"""The guard's reason for refusing :data:`PROBE`, which the CLI hands back to its model and prints."""
RUN_TIMEOUT = 300.0
MODEL = "mock-model"


# -- each CLI, set up the way a person sets it up ------------------------------------------------------------------


def _claude(home: Path, mock: MockModel) -> dict[str, str]:
    del home
    return {
        "ANTHROPIC_BASE_URL": mock.url,
        "ANTHROPIC_API_KEY": "sk-ant-mock",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def _codex(home: Path, mock: MockModel) -> dict[str, str]:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f'model = "{MODEL}"\n'
        'model_provider = "mock"\n'
        "\n"
        "[model_providers.mock]\n"
        'name = "Mock model"\n'
        f'base_url = "{mock.url}/v1"\n'
        'env_key = "OPENAI_API_KEY"\n'
        'wire_api = "responses"\n'
    )
    return {"OPENAI_API_KEY": "sk-mock"}


def _opencode(home: Path, mock: MockModel) -> dict[str, str]:
    config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "opencode" / "opencode.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    provider = {
        "npm": "@ai-sdk/openai-compatible",
        "name": "Mock model",
        "options": {"baseURL": f"{mock.url}/v1", "apiKey": "{env:OPENAI_API_KEY}"},
        "models": {MODEL: {"name": "Mock model"}},
    }
    doc = {"$schema": "https://opencode.ai/config.json", "model": f"mock/{MODEL}", "provider": {"mock": provider}}
    config.write_text(json.dumps(doc, indent=2) + "\n")
    return {
        "OPENAI_API_KEY": "sk-mock",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    }


def _gemini(home: Path, mock: MockModel) -> dict[str, str]:
    settings = home / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"enableAutoUpdate": False},
        "privacy": {"usageStatisticsEnabled": False},
    }
    settings.write_text(json.dumps(doc, indent=2) + "\n")
    return {
        "GOOGLE_GEMINI_BASE_URL": mock.url,
        "GEMINI_API_KEY": "mock-gemini-key",
        "GEMINI_TELEMETRY_ENABLED": "false",
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
    }


def _aider(home: Path, mock: MockModel) -> dict[str, str]:
    """aider's own config file in HOME, and the model's context window and prices (without them aider knows no cost
    for a model that is not on litellm's list). ``stream: false``: a streamed answer carries no usage aider reads,
    and it would count the tokens itself with a tokenizer -- not what the model reported."""
    metadata = home / ".aider.model.metadata.json"
    prices = {"input_cost_per_token": 1e-06, "output_cost_per_token": 2e-06}
    info = {"max_input_tokens": 128000, "max_output_tokens": 8192, "litellm_provider": "openai", "mode": "chat"}
    metadata.write_text(json.dumps({f"openai/{MODEL}": {**info, **prices}}, indent=2) + "\n")
    (home / ".aider.conf.yml").write_text(
        f"model: openai/{MODEL}\n"
        f"openai-api-base: {mock.url}/v1\n"
        "openai-api-key: sk-mock\n"
        f"model-metadata-file: {metadata}\n"
        "stream: false\n"
    )
    return {}


def aider_usage(body: bytes, answer: str) -> tuple[int, int]:
    """:func:`usage_by_size`, each count rounded to one aider prints exactly (``766``, ``2.5k``, ``25k``): aider
    prints its usage only rounded, so this is what a model must report for its totals to be exact."""

    def printable(count: int) -> int:
        return count if count < 1000 else round(count, -2) if count < 10_000 else round(count, -3)

    tokens_in, tokens_out = usage_by_size(body, answer)
    return printable(tokens_in), printable(tokens_out)


@dataclass(frozen=True)
class Cli:
    """One real CLI under test: its command, how a person points it at a model, and how it counts usage."""

    name: str
    configure: Callable[[Path, MockModel], dict[str, str]]
    counts_side_requests: bool = False
    """Whether the usage it prints includes its tool-less side requests (Gemini's stats count its model router)."""
    guarded: bool = True
    """Whether the supervisor gives it a guard: aider has no hooks (its sandbox is its only wall), so the mock never
    makes its children try :data:`PROBE` -- it would run."""
    usage: Usage = usage_by_size
    """What the mock model reports for each response to it."""
    project_files: tuple[tuple[str, str], ...] = ()
    """Files the person's project commits for this CLI (path, text)."""
    whole_turns: bool = False
    """Whether its model answers a turn in one reply, tool calls and all (aider: it offers the model no tools)."""
    cumulative: bool = False
    """Whether a resumed session reports the session's running total (codex's ``exec resume``), not the turn's."""
    side_requests: bool = True
    """Whether it may ask the model anything beyond its agent turns: opencode may not (init's config turns its session
    titles off, a request per session it never reports)."""


CLIS = {
    "claude": Cli("claude", _claude),
    "codex": Cli("codex", _codex, cumulative=True),
    "opencode": Cli("opencode", _opencode, side_requests=False),
    "gemini": Cli("gemini", _gemini, counts_side_requests=True),
    "aider": Cli(
        "aider",
        _aider,
        guarded=False,
        usage=aider_usage,
        whole_turns=True,
    ),
}


# -- fixtures ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def programs() -> dict[str, Path | str]:
    """Each CLI's installed program, or why it is not installed: the npm CLIs' ``node_modules/.bin/NAME``, aider's
    virtualenv's ``bin/aider``. Session-scoped, so it is computed before ``hermetic`` replaces HOME (the cache lives
    in the real one, or in ``$AGENTOPS_CLI_CACHE``)."""
    found: dict[str, Path | str] = {}
    try:
        cli_bin = install.ensure_clis()
        found.update({name: cli_bin / name for name in install.CLIS})
    except install.InstallError as exc:
        found.update(dict.fromkeys(install.CLIS, f"{exc}\ninstall them with: python -m tests.realcli.install"))
    try:
        found["aider"] = aider_install.ensure_aider()
    except install.InstallError as exc:
        found["aider"] = f"{exc}\ninstall it with: python -m tests.realcli.aider_install"
    return found


@dataclass
class Person:
    """A person's setup for one CLI: the mock model it talks to, and their repository."""

    cli: Cli
    mock: MockModel
    home: Path
    tmp: Path

    def project(self, *, policy_edit: Callable[[str], str] | None = None) -> Path:
        """A repository with ``git agentops-init``'s policy (edited by ``policy_edit``), committed and trusted."""
        files = {"check.py": CHECK, "Makefile": MAKEFILE, "README.md": "files\n", **dict(self.cli.project_files)}
        repo = make_repo(self.tmp / "repo", files=files)
        done = _git(repo, "agentops-init", "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        policy = repo / ".agentops" / "policy.toml"
        text = policy.read_text()
        assert f'default_host = "{self.cli.name}"' in text, (
            f"init did not make {self.cli.name} the default host:\n{text}"
        )
        if policy_edit is not None:
            policy.write_text(policy_edit(text))
        git(repo, "add", ".agentops/policy.toml")
        git(repo, "commit", "-q", "-m", "Add the git-agentops policy")
        trusted = _git(repo, "agentops-policy", "trust", "--yes")
        assert trusted.returncode == 0, trusted.stdout + trusted.stderr
        return repo

    def diagnosis(self, repo: Path, run_id: str) -> str:
        """What a failing assertion shows: the supervisor's log, the host logs' tails, the model's last answers."""
        logs = "".join(
            f"\n--- {p.name} ---\n" + p.read_text(errors="replace")[-3000:]
            for p in sorted((repo / ".git" / "worktrees").glob("*/agentops/host-*.log"))
        )
        return f"{supervisor_log(repo, run_id)[-6000:]}{logs}\n--- mock model ---\n{self.mock.log_tail(40)}"


def _person(
    cli: str, programs: dict[str, Path | str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mock: MockModel
) -> Person:
    """``cli`` alone on PATH (so ``init`` picks it), configured for ``mock``, in the test's HOME."""
    found = programs[cli]
    if not isinstance(found, Path):
        pytest.fail(f"{cli} is not installed: {found}")
    if not os.access(found, os.X_OK):
        pytest.fail(f"{cli} is not installed at {found}: see tests/realcli/install.py")
    agent_bin = tmp_path / "agent-bin"
    agent_bin.mkdir()
    (agent_bin / cli).symlink_to(found)
    monkeypatch.setenv("PATH", os.pathsep.join([str(agent_bin), os.environ["PATH"]]))
    home = Path(os.environ["HOME"])
    for name, value in CLIS[cli].configure(home, mock).items():
        monkeypatch.setenv(name, value)
    return Person(CLIS[cli], mock, home, tmp_path)


@pytest.fixture
def mock(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[MockModel]:
    """The mock model for the test's ``cli``, every child trying :data:`PROBE` first (where the CLI has a guard),
    logging to ``tmp_path/mock.jsonl``."""
    cli = CLIS[request.node.callspec.params["cli"]]
    with MockModel(usage=cli.usage, probe=PROBE, log=tmp_path / "mock.jsonl") as server:
        yield server


# -- helpers ----------------------------------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``git ARGS`` as a person types it in ``repo``: their shell has ``PWD`` set to it (and opencode takes its
    working directory from ``PWD``, not from the directory it was started in)."""
    env = {**os.environ, "PWD": str(repo)}
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=180, check=False)


def _start(repo: Path, goal: str) -> str:
    done = _git(repo, "agentops-run", "start", "--goal", goal, "--detach", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return str(json.loads(done.stdout)["runId"])


def _ended(doc: dict[str, Any]) -> bool:
    return doc["status"] in ("complete", "blocked", "budget-limited", "paused")


def _until_ended(person: Person, repo: Path, run_id: str) -> dict[str, Any]:
    """The run's status once it ended; on a timeout, the failure shows the host logs and the model's answers too."""
    try:
        return wait_for(repo, run_id, _ended, timeout=RUN_TIMEOUT)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{person.diagnosis(repo, run_id)}") from None


def _host_logs(repo: Path, worker: str) -> str:
    return "".join(
        p.read_text(errors="replace") for p in (repo / ".git" / "worktrees").glob(f"*/agentops/host-{worker}.log")
    )


def _wait_for_host_log(repo: Path, worker: str, text: str, timeout: float = 60) -> str:
    """The worker's host log once it shows ``text`` (the CLI prints a tool result around when it asks the model
    again), or as it is after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while text not in (log := _host_logs(repo, worker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return log


def _until_held(hold: Hold, person: Person, repo: Path, run_id: str) -> Asked:
    """Wait until ``hold`` holds a response -- or fail at once when the run ends first (or after RUN_TIMEOUT)."""
    deadline = time.monotonic() + RUN_TIMEOUT
    while not hold.holding.wait(0.5):
        seen = peek(repo, run_id)  # the run's state read here: a status process is a third of a second of CPU
        if seen is not None and not _ended(seen) and time.monotonic() <= deadline:
            continue
        doc = status(repo, run_id)
        if _ended(doc) or time.monotonic() > deadline:
            raise AssertionError(f"the run is {doc['status']}, and never got there\n{person.diagnosis(repo, run_id)}")
    assert hold.asked is not None
    return hold.asked


def _told_of_the_refusal(asked: Asked) -> bool:
    """A child's request whose tool results hold the guard's refusal of :data:`PROBE`."""
    return asked.who.role == "child" and any(REFUSAL in r.text for r in asked.results)


def _processes_of(run_id: str, tmp_path: Path) -> list[str]:
    """Live processes of the run: any whose environment names it, or whose working directory is in the test's
    directory (a CLI's own helper that dropped the environment)."""
    mine = {os.getpid(), os.getppid()}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:200]
        except OSError:
            continue
        if state == "Z":
            continue
        if f"AGENTOPS_RUN_ID={run_id}".encode() in environ or Path(cwd).is_relative_to(tmp_path):
            found.append(f"{entry.name} (cwd {cwd}): {command}")
    return found


def _no_process_left(run_id: str, tmp_path: Path) -> None:
    deadline = time.monotonic() + 30
    while (left := _processes_of(run_id, tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], "processes left after the run:\n" + "\n".join(left)


def _usage_by_generation(doc: dict[str, Any]) -> dict[tuple[str, int], tuple[int, int]]:
    """(worker, generation) -> (input, output) tokens, as ``run status`` shows the usage each generation recorded."""
    return {
        (w["workerId"], u["generation"]): (u["inputTokens"], u["outputTokens"])
        for w in doc["workers"]
        for u in w["usage"]
    }


def _review_usage(doc: dict[str, Any]) -> dict[tuple[str, int], tuple[int, int]]:
    """(``reviewer-NAME``, attempt) -> (input, output) tokens, as ``run status`` shows what each reviewer attempt
    recorded (reviewers are no workers, but spend the run's budget)."""
    return {
        (f"reviewer-{u['reviewer']}", u["generation"]): (u["inputTokens"], u["outputTokens"])
        for u in doc["budget"]["reviewUsage"]
    }


def _served(person: Person, reviewers: bool) -> dict[tuple[str, int], tuple[int, int]]:
    """(worker, generation) -> (input, output) tokens the model reported to each worker generation (or, with
    ``reviewers``, each reviewer: ``reviewer-NAME``, always generation 1 -- the mock cannot tell a retried review
    from the first), as its CLI counts them: its agent turns, and its side requests when the CLI counts those too.
    By worker, not role: a side request of a resumed session may carry only the resume prompt, which names the
    worker and generation but not the role."""
    served: dict[tuple[str, int], tuple[int, int]] = {}
    for entry in person.mock.ledger.entries():
        if not entry.worker or (entry.role == "reviewer") != reviewers:
            continue
        if entry.kind != "agent" and not person.cli.counts_side_requests:
            continue
        tokens_in, tokens_out = served.get((entry.worker, entry.generation), (0, 0))
        served[(entry.worker, entry.generation)] = (tokens_in + entry.input_tokens, tokens_out + entry.output_tokens)
    return served


def _assert_usage_is_what_was_served(
    person: Person, doc: dict[str, Any], repo: Path, run_id: str, *, stopped: frozenset[str] | set[str] = frozenset()
) -> None:
    """Every worker generation's and reviewer attempt's recorded usage, and the run's total, are exactly what the
    model reported to them. The one exception is each worker in ``stopped`` in its generation 1 (its CLI killed while
    it waited on the model) and resumed as generation 2: a CLI prints a turn's figures only when the turn ends, so
    generation 1 is recorded with what its CLI did print and marked ``partial`` -- a floor (README, "Usage and
    cost") -- and generation 2 is exact; a CLI whose resumed session reports the session's running total (codex)
    has generation 2 charged the rest of it, so the two generations together are exactly what the model reported
    to both. A CLI without :attr:`Cli.side_requests` was served nothing else."""
    served, counted = _served(person, reviewers=False), _usage_by_generation(doc)
    recorded = dict(counted)
    partial = {(w["workerId"], u["generation"]) for w in doc["workers"] for u in w["usage"] if u.get("partial")}
    why = person.diagnosis(repo, run_id)
    assert partial <= {(w, 1) for w in stopped}, f"partial usage {partial}, but only {stopped} were stopped\n{why}"
    for worker, _ in partial:
        floor, reported = recorded.pop((worker, 1)), served.pop((worker, 1), (0, 0))
        assert floor[0] <= reported[0] and floor[1] <= reported[1], f"{worker}: {floor} > served {reported}\n{why}"
        if person.cli.cumulative:  # generation 2 was charged what its session reported past generation 1's floor
            both, also = recorded.pop((worker, 2)), served.pop((worker, 2))
            assert (floor[0] + both[0], floor[1] + both[1]) == (reported[0] + also[0], reported[1] + also[1]), why
    assert recorded == served, f"recorded {recorded}\nserved {served}\n{why}"
    reviews, reviewed = _served(person, reviewers=True), _review_usage(doc)
    assert reviewed == reviews, f"reviewers recorded {reviewed}\nserved {reviews}\n{why}"
    assert doc["budget"]["usagePartial"] == bool(partial), why
    assert doc["budget"]["usedTokens"] == sum(i + o for i, o in [*counted.values(), *reviews.values()]), why
    if not person.cli.side_requests:  # nothing was served that no one counted
        side = [(e.role, e.worker, e.answer) for e in person.mock.ledger.entries() if e.kind == "side"]
        assert side == [], f"{person.cli.name} asked the model beyond its turns: {side}\n{why}"


# -- (a) a whole run, through a supervisor restart -------------------------------------------------------------------


def _kill_9(repo: Path, run_id: str) -> None:
    os.kill(supervisor_pid(repo, run_id), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while supervisor_running(repo, run_id):
        assert time.monotonic() < deadline, "the killed supervisor still holds its lock"
        time.sleep(0.05)


def _until_coordinator_idle(person: Person, repo: Path, run_id: str) -> None:
    """Wait until the coordinator ended its first turn (its CLI printed all it used): it plans the child and ends
    its turn while the child starts, so a kill before that would stop it mid-turn too."""

    def idle(doc: dict[str, Any]) -> bool:
        return _ended(doc) or any(w["role"] == "coordinator" and w["status"] == "idle" for w in doc["workers"])

    try:
        wait_for(repo, run_id, idle, timeout=RUN_TIMEOUT)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{person.diagnosis(repo, run_id)}") from None


def _child_mid_turn(asked: Asked) -> bool:
    """A child's request after its first tool call: its CLI has printed its session id by then (opencode prints
    nothing before the model's first answer)."""
    return asked.who.role == "child" and len(asked.results) >= 1


def _child_asks(asked: Asked) -> bool:
    """A child's first request, for a CLI whose model answers a turn in one reply (aider: no tools, so no tool call
    comes back within a turn). aider has printed its banner -- its session -- and written the prompt into its chat
    history, which the resumed generation restores, by then."""
    return asked.who.role == "child"


def _interrupted_turn(cli: Cli) -> Callable[[Asked], bool]:
    """The child request the supervisor is killed during: for a guarded CLI the one that carries the guard's
    refusal of :data:`PROBE` (the child's first tool call, so also a request after one: mid-turn); else the first
    request after a tool call, or (a whole-turn CLI) the child's first request."""
    if cli.whole_turns:
        return _child_asks
    return _told_of_the_refusal if cli.guarded else _child_mid_turn


@pytest.mark.slow
@pytest.mark.parametrize("cli", list(CLIS))
def test_a_real_cli_completes_a_run_with_the_policy_init_writes_across_a_supervisor_kill(
    cli: str, programs: dict[str, Path | str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mock: MockModel
) -> None:
    """Invariant: with nothing but ``init``'s policy and the person's own model setup, the real CLI plans, delivers,
    reviews and publishes a receipted run; its guard refuses a destructive command; the run's tokens are exactly
    what the model reported; nothing of the run outlives it.

    Invariant: a supervisor killed with ``kill -9`` while a child waits on the model (held on the request that
    carries the guard's refusal; aider's two children, which run at once, each on its first request), its
    coordinator idle -- ``run resume`` stops the agents it left, resumes each child's session as a new generation
    (no failure: an interruption), and the run completes; the usage stays what the model reported across the kill
    (the held responses were never delivered; see :func:`_assert_usage_is_what_was_served`).

    One run asserts both (they were two tests building the same state: init's policy, a project, a coordinator
    and a child, a review, an integration and a receipt)."""
    person = _person(cli, programs, tmp_path, monkeypatch, mock)
    repo = person.project()
    if not person.cli.guarded:  # README, "what the guard covers": nothing (no hooks), so there is no guard file
        assert guard_contents(cli, "git agentops-hook") == {}, f"{cli} has a guard now: let the mock play the probe"
    held = [mock.hold(_interrupted_turn(person.cli))]
    if person.cli.whole_turns:  # its coordinator plans both children in one reply, so beta has no dependency: both
        held.append(mock.hold(lambda asked: _child_asks(asked) and asked.who.worker != held[0].asked_worker()))
    run_id = _start(repo, GOAL)
    try:
        asked = [_until_held(hold, person, repo, run_id) for hold in held]
        if person.cli.guarded:
            host_log = _wait_for_host_log(repo, asked[0].who.worker, REFUSAL)  # read it now: it goes with the worktree
            assert REFUSAL in host_log, f"the guard's refusal of {PROBE!r} is not in the host log:\n{host_log[-3000:]}"
        _until_coordinator_idle(person, repo, run_id)  # so only the held children are mid-turn when it is killed
        _kill_9(repo, run_id)
        resumed = _git(repo, "agentops-run", "resume", run_id)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        doc = _until_ended(person, repo, run_id)
    finally:
        for hold in held:
            hold.released.set()
        stop(repo, run_id)
    why = person.diagnosis(repo, run_id)
    assert doc["status"] == "complete", why
    assert git(repo, "show", "main:alpha.txt") == "alpha" and git(repo, "show", "main:beta.txt") == "beta"
    verified = _git(repo, "agentops-receipt", "verify", "main", "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert [r["verdict"] for r in doc["integration"]["reviews"]] == ["approve"]
    stopped = {a.who.worker for a in asked}
    children = [w for w in doc["workers"] if w["workerId"] in stopped]
    assert len(children) == len(stopped) == len(held), why
    for child in children:
        assert child["role"] == "child" and child["generation"] == 2, why
        interrupted = [e for e in events(repo, run_id) if e["data"].get("workerId") == child["workerId"]]
        assert not any(e["code"] == "WORKER_FAILED" for e in interrupted), why  # an interruption is no failure
        resumed_turns = [
            e
            for e in mock.ledger.entries()
            if e.kind == "agent" and e.worker == child["workerId"] and e.generation == 2
        ]
        assert resumed_turns and all(e.prompts == 2 for e in resumed_turns), (
            f"generation 2 of {child['workerId']} did not continue its session with the resume prompt\n{why}"
        )
    _assert_usage_is_what_was_served(person, doc, repo, run_id, stopped=stopped)
    _no_process_left(run_id, tmp_path)


# -- (c) a token budget ---------------------------------------------------------------------------------------------

PER_RESPONSE = (1000, 100)
"""Every model response reports this usage in the budget test, so a generation's tokens are known before it runs."""
COORDINATOR_FIRST = 4
"""Responses of the coordinator's first generation on :data:`ONE_CHILD`: read its instructions, plan, plan the
child, end its turn."""


@pytest.mark.slow
@pytest.mark.parametrize("cli", ["codex", "opencode"])
def test_max_tokens_stops_a_real_cli_run_after_the_generation_that_crossed_it(
    cli: str, programs: dict[str, Path | str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``max_tokens`` just above the coordinator's first generation: the child's generation crosses it, the run
    stops ``budget-limited`` after it, and every generation's usage -- as the CLI reported it -- is in the status."""
    limit = COORDINATOR_FIRST * sum(PER_RESPONSE) + 1
    with MockModel(usage=fixed_usage(*PER_RESPONSE), probe=PROBE, log=tmp_path / "mock.jsonl") as mock:
        person = _person(cli, programs, tmp_path, monkeypatch, mock)
        repo = person.project(policy_edit=lambda text: text.replace("[run]\n", f"[run]\nmax_tokens = {limit}\n", 1))
        run_id = _start(repo, ONE_CHILD)
        try:
            doc = _until_ended(person, repo, run_id)
        finally:
            stop(repo, run_id)
        why = person.diagnosis(repo, run_id)
        assert doc["status"] == "budget-limited", why
        assert "token budget" in doc["statusReason"] and doc["budget"]["tokenLimit"] == limit, why
        recorded = _usage_by_generation(doc)
        coordinator = next(w["workerId"] for w in doc["workers"] if w["role"] == "coordinator")
        child = next(w["workerId"] for w in doc["workers"] if w["role"] == "child")
        assert set(recorded) == {(coordinator, 1), (child, 1)}, why  # nothing started after the crossing
        assert sum(recorded[(coordinator, 1)]) == COORDINATOR_FIRST * sum(PER_RESPONSE) < limit
        _assert_usage_is_what_was_served(person, doc, repo, run_id)
        _no_process_left(run_id, tmp_path)
