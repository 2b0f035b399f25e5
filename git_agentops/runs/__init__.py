"""A run in Git: its state journal, task book, creation and controls, and its job types."""
