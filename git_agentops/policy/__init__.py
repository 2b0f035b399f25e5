"""Policy: load and validate ``.agentops/policy.toml``, trust it per repository, bind it to runs."""
