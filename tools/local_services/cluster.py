"""A real etcd cluster for tests: N members, each in its own network namespace.

    net = TestNetwork.create()
    cluster = EtcdCluster.create(run_dir, pki, net, size=3)
    cluster.start()                       # all members up, a leader elected
    cluster.enable_auth(["operator"])     # RBAC on: root, the operator role
    leader = cluster.leader()
    cluster.kill(leader)                  # SIGKILL by pid
    cluster.restart(leader)               # same data dir: it rejoins as itself
    cluster.wait_whole()                  # every member up, one leader, caught up
    cluster.stop()

Each member serves clients and peers over TLS with the cluster PKI and
requires client certificates (`--client-cert-auth`), exactly as a single
`EtcdServer` does; members listen on their own namespace's address only.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from pyetcd import etcdrpc

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import ETCD_DOWN, Store, connect
from etcd_compute.etcd_auth import ROOT, EtcdAuth
from etcd_compute.pki import OPERATOR, Pki
from tools.local_services.etcd import EtcdServer
from tools.local_services.netns import Host, TestNetwork

CLIENT_PORT, PEER_PORT = 2379, 2380
# Written (as root, outside any test prefix) and removed by `wait_whole`.
WHOLE_KEY = "/etcd-cluster-whole-check"


class EtcdCluster:
    def __init__(self, pki: Pki, net: TestNetwork, members: list[EtcdServer],
                 hosts: list[Host]):
        self.pki = pki
        self.net = net
        self.members = members
        self.hosts = dict(zip((m.name for m in members), hosts, strict=True))
        self._clients: dict[str, Any] = {}

    @classmethod
    def create(cls, run_dir: Path, pki: Pki, net: TestNetwork, size: int = 3) -> EtcdCluster:
        """`size` members named etcd<net id>-<i> (unique certificate names per run), each in
        a namespace of its own on `net`; nothing is started yet."""
        members, hosts = [], []
        for index in range(size):
            host = net.add_host(f"etcd{index}")
            members.append(EtcdServer.create(
                run_dir, port=CLIENT_PORT, pki=pki, name=f"etcd{net.id}-{index}", ip=host.ip,
                peer_port=PEER_PORT, netns=host.netns))
            hosts.append(host)
        return cls(pki, net, members, hosts)

    # --- addresses and clients ----------------------------------------------------------

    @property
    def initial_cluster(self) -> str:
        return ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def endpoints(self) -> list[str]:
        return [m.endpoint for m in self.members]

    def client_config(self, prefix: str = "", user: str | None = None,
                      timeout: float = 5.0) -> dict[str, Any]:
        """An `etcd:` config section naming every member, as the certificate `user`."""
        config = self.members[0].client_config(prefix, user, endpoints=self.endpoints)
        return {**config, "timeout": timeout}

    # --- life -----------------------------------------------------------------------------

    def start(self, timeout: float = 30) -> EtcdCluster:
        """Spawn every member, then wait for each to be healthy (a member is healthy only
        once the cluster elected a leader, so all must be spawned first)."""
        try:
            for member in self.members:
                member.spawn(self.initial_cluster, "new")
            for member in self.members:
                member.wait_healthy(timeout)
        except ServiceUnavailable:
            self.stop()
            raise
        return self

    def enable_auth(self, operators: list[str], prefix: str = "") -> None:
        """RBAC on, for the whole cluster (users and roles are replicated)."""
        for name in operators:
            self.pki.issue(name, OPERATOR)
        with Store(self.client_config(prefix, ROOT)) as store:
            EtcdAuth(store).setup(operators)

    def kill(self, member: EtcdServer) -> None:
        """SIGKILL the member by pid (no goodbye to its peers or clients) and reap it."""
        assert member.pid, f"{member.name} is not running"
        with contextlib.suppress(ProcessLookupError):
            os.kill(member.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(member.pid, 0)
        member.pid = None

    def restart(self, member: EtcdServer, timeout: float = 30) -> None:
        """Start a stopped member again on its data dir: it rejoins as the same member."""
        assert not member.running(), f"{member.name} is running"
        member.spawn(self.initial_cluster, "existing")
        member.wait_healthy(timeout)

    def stop(self) -> None:
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                client.close()
        self._clients.clear()
        for member in self.members:
            member.stop()

    def running(self) -> list[EtcdServer]:
        return [m for m in self.members if m.running()]

    # --- what the members say ---------------------------------------------------------------

    def _client(self, member: EtcdServer) -> Any:
        """A gRPC client (as root) of this one member, kept for the cluster's life."""
        if member.name not in self._clients:
            self._clients[member.name] = connect(
                {**member.client_config("", ROOT), "timeout": 2.0})
        return self._clients[member.name]

    def status(self, member: EtcdServer) -> Any | None:
        """etcd's maintenance status of one member (`leader`, `header.member_id`,
        `raftIndex`), or None if it does not answer. (Not the HTTP gateway: etcd 3.4 refuses
        gateway calls with a client certificate now and then when auth is on.)"""
        client = self._client(member)
        try:
            return client.maintenancestub.Status(etcdrpc.StatusRequest(), client.timeout)
        except grpc.RpcError:
            return None

    def leader(self, timeout: float = 20) -> EtcdServer:
        """The member every running member names as leader (after an election, once they
        agree); raises if they do not agree within `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            found = self._agreed_leader()
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise ServiceUnavailable(f"the etcd members did not agree on a leader within "
                                         f"{timeout:.0f} s")
            time.sleep(0.1)

    def move_leader(self, to: EtcdServer, timeout: float = 20) -> None:
        """Make `to` the leader (etcd's MoveLeader, asked of the current leader), so a test
        can kill the very member a client of interest talks to."""
        leader = self.leader(timeout)
        if leader is to:
            return
        target = self.status(to)
        if target is None:
            raise ServiceUnavailable(f"{to.name} does not answer")
        client = self._client(leader)
        client.maintenancestub.MoveLeader(
            etcdrpc.MoveLeaderRequest(targetID=target.header.member_id), timeout)
        deadline = time.monotonic() + timeout
        while self.leader(timeout) is not to:
            if time.monotonic() > deadline:
                raise ServiceUnavailable(f"leadership did not move to {to.name}")
            time.sleep(0.1)

    def _agreed_leader(self) -> EtcdServer | None:
        ids: dict[int, EtcdServer] = {}
        leaders = set()
        for member in self.running():
            status = self.status(member)
            if status is None:
                return None
            ids[status.header.member_id] = member
            leaders.add(status.leader)
        if len(leaders) != 1:
            return None
        return ids.get(leaders.pop())

    def wait_whole(self, timeout: float = 30) -> None:
        """Every member runs, all follow one leader, and each has applied a write made
        through the cluster now (a restarted member caught up, it is not just listening)."""
        down = [m.name for m in self.members if not m.running()]
        if down:
            raise ServiceUnavailable(f"etcd members not running: {', '.join(down)}")
        leader = self.leader(timeout)
        key, value = WHOLE_KEY, secrets.token_hex(8)
        deadline = time.monotonic() + timeout
        self._retry(lambda: self._client(leader).put(key, value), deadline)
        for member in self.members:
            client = self._client(member)

            def applied(client: Any = client) -> bool:
                found, _ = client.get(key, serializable=True)  # this member's own state
                return found is not None and found.decode() == value

            while not self._retry(applied, deadline):
                if time.monotonic() > deadline:
                    raise ServiceUnavailable(f"{member.name} did not apply a write within "
                                             f"{timeout:.0f} s")
                time.sleep(0.1)
        self._retry(lambda: self._client(leader).delete(key), deadline)

    @staticmethod
    def _retry(call: Callable[[], Any], deadline: float) -> Any:
        """`call()`, again while the member is briefly unreachable (until `deadline`)."""
        while True:
            try:
                return call()
            except ETCD_DOWN:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
