"""Verification: run the policy's commands in a worktree, parse test counts, record evidence as notes."""
