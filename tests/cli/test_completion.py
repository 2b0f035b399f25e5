"""Shell completion: the generated bash and zsh scripts complete what ``--help`` documents, and the values a person
would otherwise copy from ``status`` (run, worker and question ids), through git's own completion too.

Why: the scripts are generated from the parsers (``docgen``); these tests run them in the real shells.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from git_agentops.cli import completion

from ..conftest import git, make_repo
from ..helpers import child, missing_tool, require_tool, write_step
from ..runkit import project, recipe, start, stop, wait_for

ROOT = Path(__file__).resolve().parents[2]
BASH = ROOT / "completions" / "bash" / "git-agentops"
ZSH = ROOT / "completions" / "zsh" / "_git-agentops"
GIT_COMPLETION = Path("/usr/share/bash-completion/completions/git")


def _complete(words: list[str], cwd: Path, *, through_git: bool = False) -> list[str]:
    """COMPREPLY for the line ``words`` (the last one being completed), in a real bash."""
    line = " ".join(words)
    setup = f"source {GIT_COMPLETION} 2>/dev/null; " if through_git else ""
    array = " ".join(json.dumps(w) for w in words)
    call = "__git_wrap__git_main" if through_git else f"_git_agentops_{words[0].removeprefix('git-agentops-')}"
    script = (
        f"{setup}source {BASH}; COMP_WORDS=({array}); COMP_CWORD={len(words) - 1}; "
        f"COMP_LINE={json.dumps(line)}; COMP_POINT={len(line)}; {call}; printf '%s\\n' \"${{COMPREPLY[@]}}\""
    )
    done = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return sorted(w.strip() for w in done.stdout.splitlines() if w.strip())


def test_the_committed_scripts_are_what_the_parsers_generate() -> None:
    every = completion.specs()
    assert BASH.read_text() == completion.bash(every) and ZSH.read_text() == completion.zsh(every)


def test_bash_completes_subcommands_and_options(tmp_path: Path) -> None:
    assert _complete(["git-agentops-run", "st"], tmp_path) == ["start", "status", "stop"]
    assert "--detach" in _complete(["git-agentops-run", "start", "--de"], tmp_path)
    assert _complete(["git-agentops-receipt", "verify", "x", "--allow"], tmp_path) == [
        "--allow-plain-commits",
        "--allow-unsigned",
        "--allowed-signers",
    ]
    assert _complete(["git-agentops-receipt", "verify", "x", "--allowed-signers", "/"], tmp_path)  # files


def test_bash_completes_run_ids_from_the_refs(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    for run in ("run-20261201-aaaaaa", "run-20261201-bbbbbb"):
        git(repo, "update-ref", f"refs/agentops/runs/{run}/state", "HEAD")
    assert _complete(["git-agentops-run", "status", "run-"], repo) == ["run-20261201-aaaaaa", "run-20261201-bbbbbb"]
    assert _complete(["git-agentops-run", "log", "run-20261201-a"], repo) == ["run-20261201-aaaaaa"]


def test_gits_loader_finds_the_script_by_command_name(tmp_path: Path) -> None:
    """bash-completion's loader sources ``completions/git-agentops-<name>`` when git asks for that name."""
    loader = BASH.with_name("git-agentops-receipt")
    script = f"source {loader}; source {loader}; declare -F _git_agentops_receipt _git_agentops_run"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.split() == ["_git_agentops_receipt", "_git_agentops_run"]


def test_git_agentops_run_completes_through_gits_own_completion(tmp_path: Path) -> None:
    if not GIT_COMPLETION.exists():  # Debian's git package ships it
        missing_tool(f"git's bash completion is not at {GIT_COMPLETION}: apt-get install -y git")
    repo = make_repo(tmp_path / "repo")
    git(repo, "update-ref", "refs/agentops/runs/run-20261201-cccccc/state", "HEAD")
    assert _complete(["git", "agentops-run", "res"], repo, through_git=True) == ["resume"]
    assert _complete(["git", "agentops-run", "stop", "run-2"], repo, through_git=True) == ["run-20261201-cccccc"]


def test_worker_and_question_ids_come_from_the_named_run(tmp_path: Path) -> None:
    repo = project(tmp_path)
    steps = [[write_step("src/w.txt", "w\n"), "{ sleep = 60 }"]]
    run_id = start(repo, recipe(tmp_path, child("w", "Waiting", steps)))
    try:
        doc = wait_for(repo, run_id, lambda d: len(d["workers"]) >= 2)
        workers = sorted(w["workerId"] for w in doc["workers"])
        assert _complete(["git-agentops-run", "watch", run_id, "--worker", ""], repo) == workers
        # answer RUN QUESTION: the question ids of that run (none asked here: nothing offered, no error)
        assert _complete(["git-agentops-run", "answer", run_id, ""], repo) == []
    finally:
        stop(repo, run_id)


def test_the_zsh_script_loads_and_defines_every_command() -> None:
    require_tool("zsh", "apt-get install -y zsh")
    names = " ".join(f"_git-agentops-{name}" for name in completion.COMMANDS)
    # with the directory on fpath, compinit makes each _git-agentops-<name> autoloadable: what _git looks for
    script = f"fpath=({ZSH.parent} $fpath); autoload -U compinit; compinit -u -D; whence -w {names}"
    done = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(": function") == len(completion.COMMANDS), done.stdout
    # and loading the script defines them all for real (the dispatch at its end does nothing outside completion)
    script = f"autoload -U compinit; compinit -u -D; source {ZSH}; whence -w {names}"
    done = subprocess.run(["zsh", "-f", "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.count(": function") == len(completion.COMMANDS), done.stdout
