"""`schedule.py serve`: the controller daemon (leader-elected) and the scheduler service it runs.

    serve          the daemon: lifecycle, campaigning, the leading loop, the watches
    election       leader election through etcd (one acts, standbys wait), the fence
    decisions      what the leader decides: reschedule failed builds, recover the
                   instances of dead hosts, forget ended instances' keys, the sweep
    queue_service  the scheduler service's loop over the request queue
    batcher        one pass over everything pending (plan, claim, write)
    hostcache      host state kept from the watches, for the service
    metrics        the controller's Prometheus metrics

Within the package: serve -> queue_service -> batcher -> hostcache; serve ->
decisions; everything may count through metrics and fence through election
(pyproject.toml).
"""
