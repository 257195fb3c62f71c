"""The compute API: Nova's v2.1 API (with microversions) for the OpenStack clients.

`schedule.py api` serves it (gunicorn, TLS) behind Keystone: users hold tokens scoped to a
project; the API alone holds the operator's etcd and Placement credentials and acts for
them through the same paths `schedule.py` takes (the scheduler or its service, the instance
model, claims in Placement).

    app.py          the WSGI stack: versions documents, auth_token, the v2.1 dispatcher
    serve.py        `schedule.py api`: gunicorn with our config, TLS, workers
    wsgi.py         requests and responses: routes, JSON bodies, Nova's error shape
    microversion.py OpenStack-API-Version / X-OpenStack-Nova-API-Version, min and max
    context.py      who asks (Keystone's headers), request ids
    policy.py       Nova's policy rules and defaults (oslo.policy), a file may override
    validation.py   JSON Schema for bodies and query strings, Nova's messages
    schemas/        the request schemas, per noun and microversion (from Nova's limits)
    handlers/       one module per resource: versions, servers (server_list, server_tags,
                    server_actions, instance_actions), server_groups, flavors, keypairs,
                    quota_sets (and limits), availability_zones, services, hypervisors
                    (thin: parse, authorize, call objects, render)
    objects/        plain objects over etcd, Placement and ops/: servers, builds (creates),
                    server_actions, instance_actions (from events), server_groups,
                    computes (hosts as services and hypervisors), flavors, keypairs, quotas
    views/          how a server, an instance action and a host look at a microversion
                    (Nova's fields from our states)
"""
