"""The lease on a run served from several machines, in one room: the record, the claim, and the supervisor's tenure.

``record`` (layer 3) is the lease as a value -- the machine, the supervisor's pid identity, a term that grows with
every change of holder, an expiry -- and does no I/O; ``claim`` (layer 8) claims, renews and takes over a run's
lease through the remote by compare-and-swap; ``tenure`` (layer 10) is how the supervisor's loop claims it at its
start, renews it with its heartbeat, and refuses a run it may not serve.
"""
