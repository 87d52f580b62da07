"""Where torch.distributed's ranks meet: the TCPStore rank 0 hosts and the address each
rank's Gloo device binds to, for the ``gloo`` backend (backends/gloo.py) and for DDP's
default group (osu_dl_bench/train/ddp.py) alike.

The store's address is ``MASTER_ADDR`` where the user set it (torch.distributed's
``env://`` convention); else 127.0.0.1 when every rank shares one host; else one of rank 0's
IPv4 addresses, sent over MPI as a number, so that no node has to resolve another's name:
the address on the first of rank 0's networks (interface address and netmask) that every
other host has an interface on, the way NCCL picks its socket interface
(src/misc/socket.cc, ``ncclFindInterfaceMatchSubnet``). Each rank's Gloo device binds to
its own interface on that network. Host names are not used: a name may resolve on its own
node only (the nodes of scripts/cluster_local.sh: "The IPv6 network addresses of (node1,
...) cannot be retrieved") or to 127.0.1.1 (Debian's /etc/hosts), and torch's Gloo then
falls back to loopback.

Every step that waits for peers is bounded by ``rendezvous_timeout()``: the store's
connect, which TCPStore retries until its ``timeout`` (PyTorch docs, torch.distributed
"TCPStore": "Timeout used by the store during initialization and for methods such as
get() and wait()"), and the group's own rendezvous. The job launcher derives it from the
stall timeout (RENDEZVOUS_TIMEOUT_VARIABLE). Then every rank exchanges its verdict over
MPI and raises the same UsageError: one message and exit 2 on every rank.
"""

from __future__ import annotations

import datetime
import fcntl
import ipaddress
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from collectives.errors import UsageError

LOOPBACK = "127.0.0.1"
STORE_ADDRESS_VARIABLE = "MASTER_ADDR"
# Seconds a rank waits for its peers at rendezvous (set by the job launcher, from the
# stall timeout); torch's own default where unset.
RENDEZVOUS_TIMEOUT_VARIABLE = "OSU_DL_BENCH_RENDEZVOUS_TIMEOUT"
DEFAULT_TIMEOUT = datetime.timedelta(minutes=5)
HINT = (
    f"set {STORE_ADDRESS_VARIABLE} to an address of rank 0's host that every node reaches "
    "(and GLOO_SOCKET_IFNAME to each node's interface on that network)"
)
# Linux's ioctl requests for an interface's flags, address and netmask (netdevice(7)).
_SIOCGIFFLAGS, _SIOCGIFADDR, _SIOCGIFNETMASK = 0x8913, 0x8915, 0x891B
_IFF_UP, _IFF_LOOPBACK = 0x1, 0x8
_MESSAGE_LIMIT = 300

# An exchange: every rank's value, in rank order (an MPI allgather over the job's ranks).
Exchange = Callable[[Any], list]
T = TypeVar("T")


@dataclass(frozen=True)
class Interface:
    """One IPv4 interface of this host that is up and not loopback."""

    name: str
    address: str
    netmask: str

    def network(self) -> ipaddress.IPv4Network:
        """The network the interface is on."""
        return ipaddress.IPv4Interface(f"{self.address}/{self.netmask}").network


# Linux's name for it (where every rank shares one host, Gloo runs over loopback).
LOOPBACK_INTERFACE = Interface("lo", LOOPBACK, "255.0.0.0")


@dataclass(frozen=True)
class Meeting:
    """Where the ranks meet: the store's host, this rank's interface for its Gloo device
    (None: torch's choice, GLOO_SOCKET_IFNAME else the host name's address) and the
    timeout."""

    host: str
    device: Interface | None
    timeout: datetime.timedelta


def rendezvous_timeout() -> datetime.timedelta:
    """How long a rank waits for its peers: RENDEZVOUS_TIMEOUT_VARIABLE seconds, else 5
    minutes (torch's default)."""
    given = os.environ.get(RENDEZVOUS_TIMEOUT_VARIABLE, "")
    try:
        seconds = float(given)
    except ValueError:
        return DEFAULT_TIMEOUT
    return datetime.timedelta(seconds=seconds) if seconds > 0 else DEFAULT_TIMEOUT


def local_interfaces() -> list[Interface]:
    """This host's IPv4 interfaces that are up, loopback left out (none where the
    platform's ioctls differ from Linux's)."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                flags = struct.unpack("H", fcntl.ioctl(probe, _SIOCGIFFLAGS, request)[16:18])[0]
                address = fcntl.ioctl(probe, _SIOCGIFADDR, request)[20:24]
                netmask = fcntl.ioctl(probe, _SIOCGIFNETMASK, request)[20:24]
            except OSError:  # no IPv4 address on it
                continue
            if flags & _IFF_UP and not flags & _IFF_LOOPBACK:
                found.append(Interface(name, socket.inet_ntoa(address), socket.inet_ntoa(netmask)))
    return found


def shared_network(hosts: list[tuple[str, list[Interface]]]) -> ipaddress.IPv4Network | None:
    """The first of rank 0's networks that every other host (name, interfaces) has an
    interface on (None if there is none); ranks on rank 0's host need none."""
    first_host, first_interfaces = hosts[0]
    others = [interfaces for name, interfaces in hosts if name != first_host]
    for interface in first_interfaces:
        network = interface.network()
        if all(any(i.network() == network for i in theirs) for theirs in others):
            return network
    return None


def meeting_place(exchange: Exchange, one_host: bool) -> Meeting:
    """Where the ranks meet (collective: every rank calls it with the same ``one_host``)."""
    timeout = rendezvous_timeout()
    given = os.environ.get(STORE_ADDRESS_VARIABLE)
    if given:  # the user's word, also on one host
        return Meeting(given, LOOPBACK_INTERFACE if one_host else None, timeout)
    if one_host:
        return Meeting(LOOPBACK, LOOPBACK_INTERFACE, timeout)
    mine = local_interfaces()
    hosts = exchange((socket.gethostname(), mine))
    if len({name for name, _ in hosts}) == 1:  # emulated nodes: one host after all
        return Meeting(LOOPBACK, LOOPBACK_INTERFACE, timeout)
    network = shared_network(hosts)
    if network is None:
        seen = "; ".join(f"{n}: {', '.join(i.address for i in f) or 'none'}" for n, f in hosts)
        raise UsageError(
            f"the Gloo rendezvous found no IPv4 network rank 0's host shares with every "
            f"other node (their addresses: {seen}): {HINT}",
            agreed=True,
        )
    store_host = next(i.address for i in hosts[0][1] if i.network() == network)
    device = next((i for i in mine if i.network() == network), None)
    return Meeting(store_host, device, timeout)


def agreed(exchange: Exchange, what: str, step: Callable[[], T]) -> T:
    """``step()`` on every rank; if it failed on any, the same UsageError on all, naming
    the first rank that failed and why."""
    try:
        result, problem = step(), None
    except (RuntimeError, OSError, ValueError) as exc:  # torch's DistError is a RuntimeError
        result, problem = None, _first_line(exc)
    problems = exchange(problem)
    failed = [(rank, text) for rank, text in enumerate(problems) if text]
    if failed:
        rank, text = failed[0]
        also = f" (and {len(failed) - 1} other)" if len(failed) > 1 else ""
        raise UsageError(f"{what}: rank {rank}{also}: {text}; {HINT}", agreed=True)
    return result  # type: ignore[return-value]


def _first_line(exc: BaseException) -> str:
    """An exception's first line, its length bounded (torch's carry a C++ backtrace)."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= _MESSAGE_LIMIT else text[:_MESSAGE_LIMIT] + "..."


def store(exchange: Exchange, rank: int, size: int, meeting: Meeting) -> Any:
    """A TCPStore hosted by rank 0 on a port the OS picks (port 0: no race for a "free"
    port), joined by every rank within ``meeting.timeout`` (collective)."""
    from torch.distributed import TCPStore

    timeout, host = meeting.timeout, meeting.host

    def host_on_rank0() -> Any:
        return TCPStore(host, 0, size, True, timeout, wait_for_workers=False) if rank == 0 else None

    hosted = agreed(exchange, f"the Gloo store could not start on rank 0 ({host})", host_on_rank0)
    port = exchange(hosted.port if hosted is not None else None)[0]
    seconds = timeout.total_seconds()
    what = f"the Gloo store at {host}:{port} could not be reached within {seconds:g} s"
    if rank == 0:
        return agreed(exchange, what, lambda: hosted)
    return agreed(exchange, what, lambda: TCPStore(host, port, size, False, timeout))
