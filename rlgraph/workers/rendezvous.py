"""Where the sockets of a process group listen: on loopback when all its processes share a machine.

A group (data parallel, rlgraph/runtime/process.py `init_data_parallel`; weight sync, workers/weight_sync.py)
opens three kinds of listening socket, and left alone each would listen beyond loopback:

    the TCPStore of rank 0   torch binds its server to every interface (`*:PORT`) whatever host it is given;
                             `listen_store` binds the socket itself and hands torch its fd (`master_listen_fd`)
    gloo's pairs             on the address the machine's host name resolves to, or GLOO_SOCKET_IFNAME's;
                             `gloo_device` names the address, `socket_env` the interface
    nccl's bootstrap         on the first interface that is not loopback, or NCCL_SOCKET_IFNAME's (`socket_env`)

`group_host` picks the address from where the members run (Ray's node IP of each): 127.0.0.1 when they are
on one machine; across machines rank 0's node IP, and each member binds its own node IP.

Torch only, no Ray.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
from collections.abc import Sequence
from typing import Any

LOOPBACK = "127.0.0.1"


def group_host(member_ips: Sequence[str]) -> str:
    """The rendezvous address of a group whose members run on `member_ips` (rank 0 first)."""
    return LOOPBACK if len(set(member_ips)) <= 1 else member_ips[0]


def is_loopback(host: str) -> bool:
    address = ipaddress.ip_address(host)
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return (mapped or address).is_loopback


def bind_host(group: str, own_ip: str) -> str:
    """The address a member binds to: loopback for a group on one machine, else its own node's IP."""
    return LOOPBACK if is_loopback(group) else own_ip


def listen_store(host: str, port: int, world_size: int, timeout_s: float, *, wait_for_workers: bool = False) -> Any:
    """Rank 0's TCPStore, listening on `host`:`port` only (port 0: one the system picks; read `.port`)."""
    import torch.distributed as dist

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(max(world_size, 16))
        port = sock.getsockname()[1]
    except OSError:
        sock.close()
        raise
    # detached: the store's server listens on it from here on (closing it under the store stops that server)
    return dist.TCPStore(host, port, world_size, is_master=True, wait_for_workers=wait_for_workers,
                         timeout=datetime.timedelta(seconds=timeout_s), master_listen_fd=sock.detach())


def gloo_device(host: str) -> Any:
    """A gloo device whose pairs listen on `host`."""
    import torch.distributed as dist

    return dist.ProcessGroupGloo.create_device(hostname=host)


def socket_env(host: str) -> dict[str, str]:
    """The environment that makes gloo's and nccl's sockets of a default group (`init_process_group`, which takes
    no gloo device) listen on loopback when `host` is loopback; empty across machines (their own choice, or the
    user's GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME)."""
    if not is_loopback(host):
        return {}
    interface = loopback_interface()
    return {"GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface} if interface else {}


def loopback_interface() -> str | None:
    """The loopback interface's name (`lo` on Linux, `lo0` on macOS), None if the system lists none."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((name for name in names if name in ("lo", "lo0")), None)
