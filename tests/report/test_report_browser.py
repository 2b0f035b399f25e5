"""The HTML report in a real headless browser: Debian's ``chromium`` driven by Playwright (never a downloaded
browser: ``executable_path`` names the system binary). Checked in the DOM, by id: every task is a node of the SVG
graph and every dependency one edge between the right two, every generation and evidence record is there, the
receipt verdict too; the page logs no console error, raises nothing, opens no dialog and requests nothing but its
own ``file://`` URL.

Without the browser (or Playwright) the test fails in CI -- ``.ci/run`` installs ``chromium`` -- and is skipped
with the reason elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from ..helpers import missing_tool
from ..runkit import cli
from .test_report import FINDING, HOSTILE, complete_run

INSTALL = "apt-get install -y chromium  (Debian's package; Playwright is in the test extra: pip install -e '.[test]')"


def _unavailable(why: str) -> None:
    missing_tool(f"the browser test needs {why}: {INSTALL}")


def system_chromium() -> str:
    """The system Chromium binary (``$AGENTOPS_CHROMIUM`` overrides)."""
    for name in (os.environ.get("AGENTOPS_CHROMIUM"), "chromium", "chromium-browser"):
        found = shutil.which(name) if name else None
        if found:
            return found
    _unavailable("a system chromium")
    raise AssertionError("unreachable")


def require_browser() -> str:
    """The system Chromium, once Playwright is known to be importable (fails in CI, skips elsewhere)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _unavailable("playwright")
    return system_chromium()


@contextmanager
def browser_page(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A page of a headless system Chromium, with ``page.seen``: requests, console messages, errors, dialogs."""
    from playwright.sync_api import sync_playwright

    executable = require_browser()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"], headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            seen: dict[str, list[Any]] = {"requests": [], "console": [], "errors": [], "dialogs": []}
            page.on("request", lambda request: seen["requests"].append(request.url))
            page.on("console", lambda message: seen["console"].append((message.type, message.text)))
            page.on("pageerror", lambda error: seen["errors"].append(str(error)))
            page.on("dialog", lambda dialog: (seen["dialogs"].append(dialog.message), dialog.dismiss()))
            page.seen = seen
            yield page
        finally:
            browser.close()


@pytest.mark.slow
def test_html_report_in_a_headless_browser(tmp_path: Path) -> None:
    require_browser()
    repo, run_id = complete_run(tmp_path)
    facts = json.loads(cli(repo, "agentops-run", "report", run_id, "--json").stdout)
    page_file = tmp_path / "report.html"
    done = cli(repo, "agentops-run", "report", run_id, "--html", str(page_file))
    assert done.returncode == 0, done.stderr
    url = page_file.resolve().as_uri()
    with browser_page() as page:
        page.goto(url, wait_until="load")
        seen = page.seen
        assert page.title() == f"Run {run_id}: complete"

        # one SVG node per task, one edge per dependency, between the right two
        tasks = facts["tasks"]
        assert page.locator("svg g.node").count() == len(tasks)
        for task in tasks:
            node = page.locator(f'svg g.node[id="task-{task["taskId"]}"]')
            assert node.count() == 1 and node.get_attribute("data-status") == task["status"]
        edges = page.eval_on_selector_all(
            "svg path.edge", "els => els.map(e => [e.dataset.from, e.dataset.to])"
        )  # Playwright evaluates this itself; the page has no script
        expected = sorted([dep, t["taskId"]] for t in tasks for dep in t["dependencies"])
        assert sorted(edges) == expected and expected
        hostile = next(t for t in tasks if t["title"] == HOSTILE)
        assert page.locator(f'[id="task-{hostile["taskId"]}"] title').text_content() == (
            f"{HOSTILE} ({hostile['taskId']})"
        )

        # every generation, every evidence record, the receipt verdict
        for gen in facts["generations"]:
            element = page.locator(f'article[id="{gen["id"]}"]')
            assert element.count() == 1 and element.get_attribute("data-outcome") == gen["outcome"]
        assert page.locator("article.gen[data-outcome=failed]").count() == 1
        for record in facts["evidence"]:
            assert page.locator(f'tr[id="{record["id"]}"]').count() == 1
        verdict = page.locator("#receipt-verdict")
        assert verdict.get_attribute("data-verdict") == "valid" and "valid" in verdict.inner_text()

        # agent text stayed text: no element came of it, nothing ran
        assert page.locator("script, img, iframe, object, embed").count() == 0
        assert FINDING in page.locator("#reviews").inner_text()
        assert seen["requests"] == [url], seen["requests"]
        assert seen["errors"] == [] and seen["dialogs"] == []
        assert [m for m in seen["console"] if m[0] in ("error", "warning")] == [], seen["console"]


@pytest.mark.slow
def test_the_demo_runs_html_report_in_a_headless_browser(tmp_path: Path) -> None:
    """The issue's own scenario: ``git agentops-run demo``'s run, its ``report --html``, opened in chromium."""
    import subprocess

    from git_agentops.demo.scenario import environment, run_demo

    require_browser()
    summary = run_demo(tmp_path, environ=os.environ, say=lambda line: None)
    env = environment(tmp_path, os.environ)
    repo, run_id = summary["repository"], summary["runId"]

    def report(*args: str) -> subprocess.CompletedProcess[str]:
        command = ["git", "agentops-run", "report", run_id, *args]
        return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=120, check=False)

    facts = json.loads(report("--json").stdout)
    page_file = tmp_path / "demo-report.html"
    assert report("--html", str(page_file)).returncode == 0
    url = page_file.resolve().as_uri()
    with browser_page() as page:
        page.goto(url, wait_until="load")
        assert page.locator("svg g.node").count() == len(facts["tasks"]) == 4  # the root and its three parts
        edges = page.eval_on_selector_all("svg path.edge", "els => els.map(e => [e.dataset.from, e.dataset.to])")
        assert sorted(edges) == sorted([d, t["taskId"]] for t in facts["tasks"] for d in t["dependencies"])
        for gen in facts["generations"]:
            assert page.locator(f'article[id="{gen["id"]}"]').count() == 1
        assert page.locator("article.gen[data-outcome=failed]").count() == 1  # the Evaluator, repaired
        for record in facts["evidence"]:
            assert page.locator(f'tr[id="{record["id"]}"]').count() == 1
        assert page.locator("#receipt-verdict").get_attribute("data-verdict") == "valid"
        assert page.seen["requests"] == [url] and page.seen["errors"] == []
        assert [m for m in page.seen["console"] if m[0] in ("error", "warning")] == []
    markdown = report().stdout  # the Markdown form has the same facts
    assert all(t["title"] in markdown for t in facts["tasks"]) and "valid" in markdown
