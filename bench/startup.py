#!/usr/bin/env python3
"""Benchmark of what the toolkit's hot processes pay to import before they do anything.

A run is thousands of short Python processes: the supervisor, ``git agentops-run start``, every agent request
(``git agentops-request``) and, in tests and the demo, the scripted agent. Each one pays the interpreter's start
and then the import of the modules its path needs; the second part is ours.

For each path a fresh interpreter imports the modules that path imports -- its command module and the modules its
functions import lazily on the way (named below with the function they come from; what those pull in at module
level follows by itself) -- and nothing else runs. The lists were checked against the ``sys.modules`` of each
process of a real small run (the supervisor, ``start``, the scripted agent): the same toolkit modules. Its CPU
(user + system, from the child's rusage) is compared with ``python -c pass`` measured in the same rounds,
interleaved: ``<path>_import_ms`` is the median CPU above ``python -c pass``, ``ratio`` the median CPU over it.
Compile the package first (``python -m compileall git_agentops``) when ``PYTHONDONTWRITEBYTECODE`` is set, or
every round compiles what changed since the last ``.pyc``.

Last line: ``startup supervise_import_ms=<n> supervise_ratio=<x> start_import_ms=<n> start_ratio=<x>
request_import_ms=<n> request_ratio=<x> agent_import_ms=<n> agent_ratio=<x>``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from benchenv import ENV, ROOT

PATHS: dict[str, tuple[str, ...]] = {
    # python -m git_agentops.cli.run supervise RUN: cli.run's build_parser, _supervise, _supervisor, _lease_ttl and
    # _logger (and every host kind, below)
    "supervise": (
        "git_agentops.cli.run",
        "git_agentops.cli.report",
        "git_agentops.cli.transition",
        "git_agentops.cli.watch",
        "git_agentops.sandbox.namespace",
        "git_agentops.lease.claim",
        "git_agentops.lease.record",
        "git_agentops.policy.trust",
        "git_agentops.runs.create",
        "git_agentops.runs.state",
        "git_agentops.supervisor.loop",
        "git_agentops.transition.journal",
        "git_agentops.gitstore.private",
    ),
    # git agentops-run start --detach: cli.run's build_parser and _start; runs.create's create_run, its recipe and
    # excludes (and every host kind, below)
    "start": (
        "git_agentops.cli.run",
        "git_agentops.cli.report",
        "git_agentops.cli.transition",
        "git_agentops.cli.watch",
        "git_agentops.policy.load",
        "git_agentops.policy.trust",
        "git_agentops.runs.create",
        "git_agentops.runs.state",
        "git_agentops.supervisor.spawn",
        "git_agentops.sandbox.plan",
        "git_agentops.model.policy",
        "git_agentops.schema.documents",
        "git_agentops.hosts.recipe",
        "git_agentops.policy.excludes",
        "git_agentops.gitstore.checkout",
    ),
    # git agentops-request ACTION: cli.request's parser, its field check and its send
    "request": (
        "git_agentops.cli.request",
        "git_agentops.model.request",
        "git_agentops.protocol.client",
        "git_agentops.protocol.mailbox",
    ),
    # python -m git_agentops.cli.agent: the scripted agent's main; hosts.scripted_process's play
    "agent": (
        "git_agentops.cli.agent",
        "git_agentops.hosts.scripted_process",
        "git_agentops.protocol.client",
        "git_agentops.protocol.mailbox",
        "git_agentops.hosts.recipe",
        "git_agentops.hosts.scripted",
        "git_agentops.process.command",
    ),
}
HOST_KINDS = "import git_agentops.model.hosts; git_agentops.model.hosts.registry()"
"""Every host kind's module, imported by the registry's first use (a run's policy names its hosts by kind)."""
WITH_HOST_KINDS = ("supervise", "start")


def cpu_ms(code: str) -> float:
    """User + system CPU, in ms, of a fresh ``python -c code`` (the child's own, from its rusage)."""
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"python -c {code!r} failed")
    proc.returncode = os.waitstatus_to_exitcode(status)
    return (usage.ru_utime + usage.ru_stime) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=15, help="rounds (each times every path once, interleaved)")
    args = parser.parse_args()
    codes = {"pass": "pass", **{name: "import " + ", ".join(mods) for name, mods in PATHS.items()}}
    for name in WITH_HOST_KINDS:
        codes[name] += "; " + HOST_KINDS
    samples: dict[str, list[float]] = {name: [] for name in codes}
    for _ in range(args.n):
        for name, code in codes.items():
            samples[name].append(cpu_ms(code))
    floor = statistics.median(samples["pass"])
    print(f"python -c pass: {floor:.1f} ms CPU (median of {args.n})")
    fields = []
    for name in PATHS:
        median = statistics.median(samples[name])
        print(f"{name:10s} {median:7.1f} ms CPU, {median - floor:6.1f} ms importing, {median / floor:.2f}x")
        fields.append(f"{name}_import_ms={median - floor:.0f} {name}_ratio={median / floor:.2f}")
    print("startup " + " ".join(fields))


if __name__ == "__main__":
    main()
