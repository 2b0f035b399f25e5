#!/usr/bin/env python3
"""The README's picture of ``git agentops-run report --html``: the demo run, its report, a headless screenshot.

Runs ``git agentops-run demo``'s scenario (three tasks, one repaired after failing verification, two reviewers, a
signed receipt) on a scratch repository, writes its HTML report, opens it in the system ``chromium`` through
Playwright (``executable_path``: no browser is downloaded) and saves the top of the page as ``docs/report.png``.

    python bench/report_screenshot.py [--out docs/report.png] [--height 960]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from git_agentops.demo.scenario import environment, run_demo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "docs" / "report.png")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=960, help="how much of the page's top to keep")
    parser.add_argument("--html", type=Path, help="also keep the HTML report here")
    args = parser.parse_args()
    chromium = shutil.which(os.environ.get("AGENTOPS_CHROMIUM") or "chromium")
    if chromium is None:
        print("needs the system chromium: apt-get install -y chromium", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="agentops-report-shot-") as tmp:
        root = Path(tmp)
        summary = run_demo(root, environ=os.environ, say=lambda line: print(line, file=sys.stderr))
        page_file = root / "report.html"
        subprocess.run(
            ["git", "agentops-run", "report", summary["runId"], "--html", str(page_file)],
            cwd=summary["repository"],
            env=environment(root, os.environ),
            check=True,
        )
        if args.html:
            shutil.copyfile(page_file, args.html)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.goto(page_file.as_uri(), wait_until="load")
            page.screenshot(path=str(args.out))
            browser.close()
    print(f"report screenshot written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
