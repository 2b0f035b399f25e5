"""Health checks behind ``git agentops-doctor``: is this machine and this repository ready for git-agentops --
Python and its libraries, git, ssh-keygen, the schemas, the repository, its hooks, the agents' sandbox, receipt
signing and the service manager -- as a report of checks, each ok, warn or fail.

It asks every layer below it (the store, policy, the sandbox, the service managers, hooks), so it ranks above the
hooks; the command prints the report (:mod:`git_agentops.cli.doctor`).
"""
