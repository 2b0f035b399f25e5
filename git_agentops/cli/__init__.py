"""Command-line layer: one module per ``git-agentops-<name>`` command, plus the shared boundary in ``common``."""
