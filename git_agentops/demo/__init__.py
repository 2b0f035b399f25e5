"""The end-to-end demo (``git agentops-run demo``): a scratch calculator project, its policy, signing key and the
scripted agent's recipe, then the whole loop -- trust, run, verify the receipt -- driven through the commands.

It runs the toolkit's own programs (``git agentops-policy``, ``-run``, ``-receipt``) as a user would, so it ranks
just below the command-line layer that offers it (:mod:`git_agentops.cli.run` prints its summary).
"""
