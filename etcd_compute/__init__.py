"""etcd-compute: Placement picks hosts, etcd carries the work, libvirt runs the VMs."""

__version__ = "0.1.0"

import os

# gRPC's C core would print its own lines (a failed TLS handshake, say) on stderr, around
# our one-line errors; it must know before grpc is imported, by whichever module of ours
# imports it first. An operator's own setting wins.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")
