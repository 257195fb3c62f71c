"""Zones: child installations federated behind one scheduler (the seed's Distributed
Scheduler document, with an estimator as Karmada has it).

A zone is one installation: its own etcd, Placement and computes, usable on
its own. A parent records its children in its own etcd (`registry`), reaches
them and theirs with the credentials it holds (`tree`), asks each how much of
a request it can take (`estimate`), merges the answers by weight into one
plan (`merge`), and claims and writes in every chosen zone at once, all or
nothing (`federation`, `undo`, `journal`). `lookup` finds an instance in any
zone; `info` rolls up what the zones have.
"""
