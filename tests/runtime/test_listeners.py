"""No listener beyond loopback: the rendezvous stores and the gloo pairs of the data-parallel and weight-sync
groups bind to 127.0.0.1 when the group's processes share a machine (rlgraph/workers/rendezvous.py)."""

from __future__ import annotations

import datetime
import os
import socket

import pytest
import torch

from rlgraph.workers import rendezvous

from .helpers import Started
from .plans import grpo_plan

psutil = pytest.importorskip("psutil")


def _listening(pid: int) -> list[tuple[str, int]]:
    return [(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections("inet")
            if c.status == psutil.CONN_LISTEN]


def _beyond_loopback(addresses: list[tuple[str, int]]) -> list[tuple[str, int]]:
    return [(ip, port) for ip, port in addresses if not rendezvous.is_loopback(ip)]


# --- no Ray ---


def test_a_group_on_one_machine_rendezvous_on_loopback_and_across_machines_on_rank_0s_node():
    assert rendezvous.group_host(["10.0.0.5", "10.0.0.5"]) == rendezvous.LOOPBACK
    assert rendezvous.group_host(["10.0.0.5", "10.0.0.6"]) == "10.0.0.5"
    assert rendezvous.bind_host(rendezvous.LOOPBACK, "10.0.0.6") == rendezvous.LOOPBACK
    assert rendezvous.bind_host("10.0.0.5", "10.0.0.6") == "10.0.0.6"  # each member binds its own node
    assert rendezvous.is_loopback("::ffff:127.0.0.1") and not rendezvous.is_loopback("::")
    assert rendezvous.socket_env("10.0.0.5") == {}  # across machines: gloo's and nccl's own choice, or the user's


def test_the_store_listens_on_the_host_it_is_given_and_serves_its_clients():
    import torch.distributed as dist

    store = rendezvous.listen_store(rendezvous.LOOPBACK, 0, 2, 10)
    mine = [a for a in _listening(os.getpid()) if a[1] == store.port]
    assert mine == [(rendezvous.LOOPBACK, store.port)]  # not `*:PORT`, as torch's own server binds
    client = dist.TCPStore(rendezvous.LOOPBACK, store.port, 2, is_master=False, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=10))
    store.set("key", "value")
    assert client.get("key") == b"value"


def test_a_port_in_use_is_an_os_error_not_a_store_on_another_port():
    with socket.socket() as taken:
        taken.bind((rendezvous.LOOPBACK, 0))
        taken.listen()
        with pytest.raises(OSError):
            rendezvous.listen_store(rendezvous.LOOPBACK, taken.getsockname()[1], 2, 1)


def test_a_gloo_group_of_one_listens_on_loopback():
    from rlgraph.workers import weight_sync

    store = weight_sync.open_store(rendezvous.LOOPBACK, 1, 10)
    group = weight_sync.open_group(rendezvous.LOOPBACK, store.port, 0, 1, "gloo", rendezvous_timeout_s=10,
                                   collective_timeout_s=10, store=store, own_ip="10.0.0.6")
    group.broadcast(torch.ones(2), 0).wait()
    assert _listening(os.getpid())
    assert _beyond_loopback(_listening(os.getpid())) == []


# --- on Ray: the groups of a lowered plan ---


def test_a_data_parallel_and_a_weight_sync_group_listen_on_loopback_only(ray_session, arith_model):
    from rlgraph.runtime.versions import PolicyVersions
    from rlgraph.runtime.weights import WeightSync

    plan = grpo_plan(actor_replicas=2, rollout_pool="gen")  # actor at 2 replicas, its rollout on a pool of its own
    with Started(plan) as started:
        assert started.lowered.sync_edges  # the weight-sync group is there ...
        info = started.lowered.info
        assert ray_session.get(started.lowered.process_of("actor").data_parallel_info.remote())["world_size"] == 2
        WeightSync(plan, started.lowered, started.specs, PolicyVersions()).sync()
        listening = {process: _listening(info[process]["pid"]) for process in info}
        assert all(listening.values())  # the test sees the stores' and gloo's listeners at all
        beyond = {process: _beyond_loopback(addresses) for process, addresses in listening.items()}
        assert not any(beyond.values()), beyond
