"""Environments that belong to the checkout being verified: made by setup inside it, paid for once per lockfile."""
