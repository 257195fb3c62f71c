"""`make tempest`: Tempest's `tempest.api.compute` tests as the judge of the compute API.

    python -m tools.tempest_run [--smoke] [--concurrency N] [--keep]

`cloud.py` starts what `make up` starts (etcd, Placement, Keystone, Glance, the compute
API; TLS and RBAC), on free ports in run/tempest/, with a controller (`schedule.py serve`),
two compute hosts on the fake driver and two Glance images; `conf.py` writes the
tempest.conf that says what this cloud has; Tempest runs from its own virtualenv
(`.venv-tempest`); `report.py` (run by that virtualenv's Python) reads the subunit stream
into the report: passed, skipped with Tempest's reason, failed. Everything started is
stopped after, by pid.

`--scenario` (`make tempest SCENARIO=1`): Tempest's scenario tests against `scenario.py`'s
cloud of real TCG guests on two hypervisor hosts, Tempest run in the outside namespace.
"""
