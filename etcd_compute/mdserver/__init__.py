"""The metadata server guests reach at http://169.254.169.254/, and its supervisor.

    python -m etcd_compute.mdserver --config mdserver.conf [--pid-file PATH]

`server` is the HTTP server (one per host, a process of its own), `admission`
holds each guest to its share of the server's connections, `resolver` finds
which instance is asking, `content` renders what it may see, and `supervisor`
is what the compute daemon uses to start and stop the server.
"""
