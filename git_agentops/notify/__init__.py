"""Notifications: the person told when a run needs them or ends -- a question, an approval, a block, the budget,
completion -- by commands of their own configuration (:mod:`.record`, :mod:`.config`), delivered from the run's
committed journal in order, retried, never in the run's way (:mod:`.deliver`)."""
