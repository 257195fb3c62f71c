"""Errors that end up in front of an operator as one line.

Every exception we raise on purpose derives from `EtcdComputeError`; the CLIs
print `str(exc)` and exit with `exit_code`, never a traceback.
"""


class EtcdComputeError(Exception):
    """Base class: the message is one line that says what is wrong and, where
    we know it, how to fix it."""

    exit_code = 1


class UsageError(EtcdComputeError):
    """The operator's input (arguments, query) is malformed."""

    exit_code = 2


class ConfigError(EtcdComputeError):
    """A configuration file is unreadable or invalid."""

    exit_code = 2


class ServiceUnavailable(EtcdComputeError):
    """etcd, Placement or libvirt cannot be reached."""

    exit_code = 3


class EtcdUnavailable(ServiceUnavailable):
    """etcd cannot be reached (or the TLS handshake with it failed)."""


class PlacementUnavailable(ServiceUnavailable):
    """Placement (or Keystone in front of it) cannot be reached or refuses our credentials."""


class GlanceUnavailable(ServiceUnavailable):
    """Glance (or Keystone in front of it) cannot be reached or refuses our credentials."""


class GlanceError(EtcdComputeError):
    """Glance answered with an error we cannot handle here."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class NeutronUnavailable(ServiceUnavailable):
    """Neutron (or Keystone in front of it) cannot be reached or refuses our credentials."""


class NeutronError(EtcdComputeError):
    """Neutron refused a request: its status and its error type (`PortNotFound`,
    `IpAddressAlreadyAllocated`, `OverQuota`, ...), as its `NeutronError` body names it."""

    def __init__(self, message: str, status: int | None = None, kind: str = ""):
        super().__init__(message)
        self.status = status
        self.kind = kind


class PlacementError(EtcdComputeError):
    """Placement answered with an error we cannot handle here."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


class ConflictError(PlacementError):
    """409 from Placement: a generation moved or capacity ran out."""


class NoValidHost(EtcdComputeError):
    """Nothing fits the request; `reasons` explains why, one line each."""

    def __init__(self, reasons: list[str]):
        super().__init__("NO ALLOCATIONS LEFT")
        self.reasons = reasons


class NotFound(EtcdComputeError):
    """An instance, provider or key that was asked for does not exist."""


class InvalidMessage(EtcdComputeError):
    """A message read from or written to etcd does not match its schema."""


class BuildError(EtcdComputeError):
    """A driver could not build an instance; the message is the reason."""


class RequestError(BuildError):
    """The request — its image, URL, checksum, size, format — is at fault, not the host.

    The compute ends such a build in ERROR without rescheduling it and without
    counting it against the host. One string argument, so it pickles across
    the worker pool unchanged.
    """
