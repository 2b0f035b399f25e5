"""Processes the toolkit starts and stops: commands that cannot hang it, and identities that survive pid reuse."""
