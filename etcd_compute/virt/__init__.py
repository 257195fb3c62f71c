"""Building blocks of the libvirt driver, one concept per module.

- images: the download cache of base images (by URL, sha256-checked, evicted LRU).
- disks: per-instance qcow2 overlays on those bases.
- configdrive: the NoCloud ISO (volume id cidata) each guest gets.
- domain: the libvirt domain XML and how we recognise our own domains.
- network: the libvirt NAT network, its DHCP leases, the metadata address.
- instance_files: the per-instance directory and what lives in it.

`etcd_compute.drivers.libvirt` puts them together; `etcd_compute.mdserver`
serves the metadata they write.
"""
