#!/usr/bin/env python3
"""Benchmark of signed controls: sending one to the shared remote, and judging one on the supervising machine.

**Send.** One clone and two bare servers. For each of ``--rounds`` controls, alternating:

* ours: :func:`git_agentops.controls.send.send` -- sign the control with ``ssh-keygen -Y sign``, store it as a
  commit on its ref, push that ref create-only (``--force-with-lease=<ref>:``) to the first server;
* baseline: ``git push`` of a new ref holding a commit of the same two files (no signature made) to the second.

**Judge.** :func:`git_agentops.controls.apply.judge` of one control (read its commit, parse it, check the SSH
signature in process against an allowed signers file, match the principal) ``--judged`` times, against
``ssh-keygen -Y verify`` of the same signature and data -- what checking it with OpenSSH alone costs, side by side.

Last line: ``controls send_s=<s> send_vs_push=<ratio> judge_ms=<ms> judge_vs_ssh_keygen=<ratio>``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchenv import git

from git_agentops.clock import SystemClock
from git_agentops.controls.apply import Rules, judge
from git_agentops.controls.record import NAMESPACE, Control, new_id
from git_agentops.controls.send import send
from git_agentops.gitstore.identity import Identity
from git_agentops.gitstore.repo import open_store
from git_agentops.model.policy import Policy, effective
from git_agentops.receipts import sshsig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--judged", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-controls-") as tmp:
        root = Path(tmp)
        key = root / "alice"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        public = " ".join(key.with_suffix(".pub").read_text().split()[:2])
        signers = root / "allowed_signers"
        signers.write_text(f'alice@example.com namespaces="{NAMESPACE}" {public}\n')
        repo = root / "clone"
        git(root, "init", "-q", "-b", "main", str(repo))
        git(repo, "commit", "-q", "--allow-empty", "-m", "base")
        for name in ("ours.git", "theirs.git"):
            git(root, "init", "-q", "--bare", str(root / name))
            git(repo, "remote", "add", name.split(".")[0], str(root / name))
        store = open_store(repo, clock=SystemClock(), identity=Identity("bench", "bench@example.com"))
        ours: list[float] = []
        theirs: list[float] = []
        made: list[tuple[Control, str]] = []
        for i in range(args.rounds):
            now = time.time()
            control = Control(new_id(now), "run-bench", "answer", now, "alice", question_id="q-1", text=f"yes {i}")
            pair = [("ours", ours), ("theirs", theirs)]
            for remote, times in pair if i % 2 == 0 else pair[::-1]:
                start = time.perf_counter()
                if remote == "ours":
                    made.append((control, send(store, "ours", control, [key])))
                else:
                    blob = git(repo, "hash-object", "-w", "--stdin", input=control.payload().decode())
                    tree = git(repo, "mktree", input=f"100644 blob {blob}\tcontrol.json\n")
                    commit = git(repo, "commit-tree", tree, "-m", "plain")
                    git(repo, "push", "-q", "theirs", f"{commit}:refs/plain/{i}")
                times.append(time.perf_counter() - start)
        policy = Policy.from_effective(effective({"version": 1}))
        rules = Rules(policy, signers.read_bytes(), "bench")
        control, commit = made[-1]
        start = time.perf_counter()
        for _ in range(args.judged):
            judge(store, "run-bench", control.control_id, commit, rules)
        judged = (time.perf_counter() - start) / args.judged
        armored = git(repo, "show", f"{commit}:control.sig") + "\n"
        sig_file, data_file = root / "control.sig", root / "control.json"
        sig_file.write_text(armored)
        data_file.write_bytes(control.payload())
        rounds = max(5, args.judged // 20)
        start = time.perf_counter()
        for _ in range(rounds):
            argv = ["ssh-keygen", "-Y", "verify", "-f", str(signers), "-I", "alice@example.com", "-n", NAMESPACE]
            with data_file.open("rb") as data:
                subprocess.run([*argv, "-s", str(sig_file)], stdin=data, capture_output=True, check=True)
        baseline = (time.perf_counter() - start) / rounds
        assert sshsig.dearmor(armored.encode())  # the signature under test is the one the judge checked
        send_s, push_s = statistics.median(ours), statistics.median(theirs)
        print(f"send (sign + commit + create-only push): median {send_s * 1000:.1f} ms")
        print(f"plain git push of a new ref (hash-object + mktree + commit-tree + push): {push_s * 1000:.1f} ms")
        print(f"judge (in process): {judged * 1000:.2f} ms; ssh-keygen -Y verify: {baseline * 1000:.2f} ms")
        print(
            f"controls send_s={send_s:.4f} send_vs_push={send_s / push_s:.2f} judge_ms={judged * 1000:.3f} "
            f"judge_vs_ssh_keygen={judged / baseline:.3f}"
        )


if __name__ == "__main__":
    main()
