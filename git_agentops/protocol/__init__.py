"""The worker protocol: the mailbox files an agent and its supervisor exchange, and the client agents call."""
