"""Building blocks of the libvirt driver, one concept per module.

- sources: reading an image URL safely (allowed directories, size caps, a deadline).
- qemu_img: qemu-img with an explicit format, resource limits and a parent-death signal.
- images: the download cache of base images (by URL, sha256-checked, evicted LRU).
- disks: per-instance qcow2 overlays on those bases.
- configdrive: the NoCloud ISO (volume id cidata) each guest gets.
- domain: the libvirt domain XML and how we recognise our own domains.
- network: the libvirt NAT network, its DHCP leases, the metadata address.
- instance_files: the per-instance directory and what lives in it.
- nwfilter: the guest network filters (no spoofing, nothing of the host's but
  DHCP, DNS and the metadata server).

`etcd_compute.drivers.libvirt` puts them together; `etcd_compute.mdserver`
serves the metadata they write.
"""

import libvirt

# libvirt prints every error on stderr by default; we raise them as exceptions instead
# and report each in one line. Once here, for every user of the virt layer (the
# drivers, the metadata server).
libvirt.registerErrorHandler(lambda _context, _error: None, None)
