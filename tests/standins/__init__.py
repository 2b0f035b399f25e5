"""Stand-in agent CLIs (``claude``, ``codex``, ``opencode``) and the fake model they share, for whole-run tests."""
