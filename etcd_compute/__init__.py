"""etcd-compute: Placement picks hosts, etcd carries the work, libvirt runs the VMs."""

__version__ = "0.1.0"
