"""The merge queue of a target: runs' integrations enqueued in Git, verified speculatively, published by one CAS.

With ``[queue] enabled = true`` a finalized run does not race the others for the target: it enqueues its frozen
deliveries on ``refs/agentops/queue/<target>`` (:mod:`.book`, an authenticated journal written by CAS) and waits.
Whichever waiting supervisor holds the queue's lease (``lease.json`` in the same journal) processes it
(:mod:`.process`): candidate k is built in memory on candidate k-1, up to ``[queue] parallel`` candidates are
verified at once in clean checkouts, the longest verified prefix is published with one compare-and-swap, and an entry
whose own candidate fails -- on top of candidates that passed, twice on the same tree -- is evicted with its
evidence; the entries after it are rebuilt without it. Each run then receipts and completes its own integration
(:mod:`git_agentops.integrate.pipeline`).
"""
