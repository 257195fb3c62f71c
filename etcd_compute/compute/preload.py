"""What the compute's forkserver loads before it forks the pool's workers (pool.py names
this module in the forkserver's preload; nothing else imports it).

Pebble's worker loop and worker.py are imported once, there, instead of in every worker
(~25 ms of CPU a worker), with the garbage collector off (what they make lives as long as
the forkserver: its passes would free nothing, ~5 ms). Then everything loaded is frozen
(`gc.freeze`, the use Python's documentation gives it: before a fork without exec): the
collector of a worker never goes over what it inherited (nor copies those pages to write
its counts), and the forkserver's exit does not collect it either (~10 ms). The driver is
not loaded here: it is chosen by config and may hold hypervisor state (libvirt's); each
worker imports its own.
"""

from __future__ import annotations

import gc

gc.disable()

import pebble  # noqa: E402, F401 (loaded for the workers)

from etcd_compute.compute import worker  # noqa: E402, F401 (loaded for the workers)

gc.freeze()
gc.enable()
