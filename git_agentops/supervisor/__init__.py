"""The supervisor of a run: one loop owns the run's state; handlers decide from a snapshot and return effects the
loop carries out; workers' lifecycles and turns, briefing, scheduling. The loop drives the policy transitions
(``transition/``) and holds the lease (``lease/``).

What handlers see of the loop is ``ports`` (``Loop``, ``Binding``, ``Snapshot``); requests are validated, fenced
and answered through the loop's one writer of ``response.json`` (``requests``, ``refusals``).
"""
