"""A run in Git: its state journal, task book, worker workspaces, creation and controls, and its job types."""
