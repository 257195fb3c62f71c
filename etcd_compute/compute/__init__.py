"""The compute daemon: registers a host in Placement, watches etcd, runs jobs."""
