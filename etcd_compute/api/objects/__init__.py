"""Plain objects of the compute API over etcd and Placement (no HTTP here)."""
