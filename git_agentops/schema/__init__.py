"""Strict JSON documents and the JSON Schema subset that validates them (the schemas ship in ``schemas/``)."""
