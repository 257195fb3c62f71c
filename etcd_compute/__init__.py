"""etcd-compute: Placement picks hosts, etcd carries the work, libvirt runs the VMs."""

__version__ = "0.1.0"

import importlib
import os
import sys
import types

# gRPC's C core would print its own lines (a failed TLS handshake, say) on stderr, around
# our one-line errors; it must know before grpc is imported, by whichever module of ours
# imports it first. An operator's own setting wins.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")


class _ImportedOnFirstUse(types.ModuleType):
    """Stands in sys.modules for a module until one of its names is asked for: then the
    module itself is imported (in its place) and answers."""

    def __getattr__(self, name: str) -> object:
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


# grpc's package imports grpc.aio, its asyncio API, at its end: some 6 ms of CPU in every
# process of ours that talks to etcd (its classes, typing_extensions), and nothing of ours
# (nor pyetcd) uses it. Until something does, the stand-in takes its place; `grpc.aio.X`
# then imports it as before.
sys.modules.setdefault("grpc.aio", _ImportedOnFirstUse("grpc.aio"))
