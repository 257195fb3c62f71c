#!/usr/bin/env python3
"""The original toy's `schedule.py`, as a process per request: baseline (e') of the report.

    python bench/toy_schedule.py CONFIG.yaml 'resources=VCPU:1,MEMORY_MB:256,DISK_GB:1'

What the toy's command did, written again here (its code is cdent/etcd-compute; nothing
of it is copied): read a YAML config, open an etcd client (the `etcd3` API, here
`pyetcd`, which keeps it) and a `requests` session to Placement, ask for allocation
candidates with no limit, claim the first with `PUT /allocations/<uuid>` (a 409: the
next one), put the spec on the host's key, print `NOTIFIED TARGET, <rp>, OF INSTANCE
<uuid>` (or `NO ALLOCATIONS LEFT`, exit 1). The toy's imports and nothing of ours, so
the process costs what the toy's did; only the spec is our `instance_spec` at our key
(the toy's message at its key would not be built by our compute), unvalidated JSON as
the toy wrote it. The report runs 8 and 32 of these at once against `schedule.py`'s
own processes ((f8s), (f32s)): the comparison a user of either command sees.
"""

from __future__ import annotations

import json
import sys
import time
import uuid

import pyetcd
import requests
import yaml


def main(argv: list[str]) -> int:
    config_path, resources = argv
    with open(config_path) as f:
        config = yaml.safe_load(f)
    placement, etcd = config["placement"], config["etcd"]
    host, port = etcd["endpoints"][0].rsplit(":", 1)
    client = pyetcd.client(host=host, port=int(port))
    session = requests.Session()
    session.headers.update({"x-auth-token": placement.get("token", "admin"),
                            "openstack-api-version": "placement 1.39",
                            "accept": "application/json"})
    endpoint = placement["endpoint"].rstrip("/")
    answer = session.get(f"{endpoint}/allocation_candidates?{resources}").json()
    consumer = str(uuid.uuid4())
    ids = config["scheduler"]["project_id"], config["scheduler"]["user_id"]
    wanted = dict((rc, int(n)) for rc, n in
                  (pair.split(":") for pair in resources.removeprefix("resources=").split(",")))
    for request in answer.get("allocation_requests", []):
        allocations = request["allocations"]
        # (consumer_type: required since microversion 1.38, after the toy's time)
        claim = {"allocations": allocations, "project_id": ids[0], "user_id": ids[1],
                 "consumer_generation": None, "consumer_type": "INSTANCE"}
        if not session.put(f"{endpoint}/allocations/{consumer}", json=claim):
            continue
        target = next(iter(allocations))
        spec = {"action": "build", "uuid": consumer, "name": f"toy-{consumer[:8]}",
                "host": target, "resources": wanted, "allocations": allocations,
                "image": {"url": "file:///dev/null", "sha256": None},
                "project_id": ids[0], "user_id": ids[1], "requested_at": time.time()}
        client.put(f"{etcd.get('prefix', '')}/hosts/{target}/specs/{consumer}",
                   json.dumps(spec))
        print(f"NOTIFIED TARGET, {target}, OF INSTANCE {consumer}")
        return 0
    print("NO ALLOCATIONS LEFT")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
