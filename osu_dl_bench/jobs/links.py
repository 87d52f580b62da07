"""Whether the nodes of a stalled job answer over the network, so that a job whose ranks all
wait in one call is not blamed on its algorithm when a node's link is down.

Each node gets one bounded TCP connect from the process that launched the job, all at
once: an accepted or a refused connection is an answer (the node's network stack replied;
nothing needs to listen), a timeout or "no route to host" is none. The address is the one
the launcher's host list gives (HOST_ADDRESSES_VARIABLE, set by scripts/cluster_local.sh
env), else what the name resolves to here. No MPI here.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

# NAME=ADDRESS,... : the nodes' addresses where their names do not resolve here.
HOST_ADDRESSES_VARIABLE = "OSU_DL_BENCH_HOST_ADDRESSES"
# Seconds a connect may take: a node on a working link answers in well under a
# millisecond; ARP gives up on a silent one after about 3 s (arp(7): mcast_solicit 3).
PROBE_TIMEOUT = 2.0
# The port asked: ssh's, which a node that mpiexec reaches through ssh listens on; where
# nothing listens the refusal is the answer.
PROBE_PORT = 22
# Errors that are an answer from the node: it replied, only not with a connection.
_ANSWERS = (errno.ECONNREFUSED, errno.ECONNRESET)


@dataclass(frozen=True)
class NodeAnswer:
    """One node's answer: ``problem`` is None when it answered, else why it did not."""

    node: str
    address: str | None
    problem: str | None

    def text(self) -> str:
        """'node2 (10.0.0.2)'."""
        return self.node if self.address in (None, self.node) else f"{self.node} ({self.address})"


def host_addresses(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The NAME=ADDRESS pairs HOST_ADDRESSES_VARIABLE gives (malformed words are ignored:
    the name is then resolved instead)."""
    env = os.environ if env is None else env
    pairs = (word.split("=", 1) for word in env.get(HOST_ADDRESSES_VARIABLE, "").split(","))
    return {pair[0]: pair[1] for pair in pairs if len(pair) == 2 and all(pair)}


def connect_answer(
    address: str, port: int = PROBE_PORT, timeout: float = PROBE_TIMEOUT
) -> str | None:
    """None if ``address`` answers a TCP connect within ``timeout`` s, else why not."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer to a TCP connect within {timeout:g} s"
    except OSError as exc:
        if exc.errno in _ANSWERS:
            return None
        return f"TCP connect failed: {exc.strerror or exc}"


def probe_nodes(
    nodes: Sequence[str],
    addresses: Mapping[str, str] | None = None,
    connect: Callable[[str], str | None] = connect_answer,
) -> list[NodeAnswer]:
    """Each node's answer, asked at once (the whole probe takes one timeout at most)."""
    known = host_addresses() if addresses is None else addresses

    def ask(node: str) -> NodeAnswer:
        address = known.get(node, node)
        return NodeAnswer(node, address, connect(address))

    if not nodes:
        return []
    with ThreadPoolExecutor(max_workers=min(len(nodes), 64)) as pool:
        return list(pool.map(ask, nodes))
