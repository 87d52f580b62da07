"""Where torch.distributed's ranks meet (collectives/backends/rendezvous.py): the store's
address is one every node reaches without resolving a name, the user's MASTER_ADDR wins,
and a failure on any rank is the same one message on every rank. No MPI: the exchange
between ranks is simulated."""

from __future__ import annotations

import datetime
import ipaddress

import pytest

from collectives.backends import rendezvous
from collectives.backends.rendezvous import Interface
from collectives.errors import UsageError

ETH = Interface("eth0", "10.213.40.1", "255.255.255.0")
MGMT = Interface("eth1", "192.168.5.1", "255.255.0.0")


def _exchange_of(values_by_rank: list) -> rendezvous.Exchange:
    """An exchange that answers with the other ranks' values (this rank's own as given)."""

    def exchange(mine):
        return values_by_rank

    return exchange


def test_the_store_is_on_rank_0s_first_network_every_other_node_shares():
    hosts = [
        ("node1", [MGMT, ETH]),
        ("node1", [MGMT, ETH]),
        ("node2", [Interface("eth0", "10.213.40.2", "255.255.255.0")]),
    ]
    assert rendezvous.shared_network(hosts) == ipaddress.IPv4Network("10.213.40.0/24")


def test_no_shared_network_is_none_and_ranks_on_rank_0s_host_need_none():
    other = ("node2", [Interface("eth0", "10.9.9.2", "255.255.255.0")])
    assert rendezvous.shared_network([("node1", [ETH]), other]) is None
    assert rendezvous.shared_network([("node1", [ETH]), ("node1", [])]) == ETH.network()


def test_across_nodes_each_rank_meets_at_rank_0s_address_and_binds_its_own(monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    mine = Interface("eth0", "10.213.40.2", "255.255.255.0")
    monkeypatch.setattr(rendezvous, "local_interfaces", lambda: [mine])
    hosts = [("node1", [MGMT, ETH]), ("node2", [mine])]
    meeting = rendezvous.meeting_place(_exchange_of(hosts), one_host=False)
    # An address, not a name: node2 cannot resolve "node1" on the local cluster.
    assert meeting.host == "10.213.40.1"
    assert meeting.device == mine


def test_no_network_in_common_is_one_message_that_names_the_addresses(monkeypatch):
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    lone = Interface("eth0", "10.9.9.2", "255.255.255.0")
    monkeypatch.setattr(rendezvous, "local_interfaces", lambda: [lone])
    with pytest.raises(UsageError, match="no IPv4 network.*node2: 10.9.9.2.*MASTER_ADDR") as e:
        rendezvous.meeting_place(_exchange_of([("node1", [ETH]), ("node2", [lone])]), False)
    assert e.value.agreed


def test_master_addr_wins_also_on_one_host(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "192.0.2.1")
    meeting = rendezvous.meeting_place(_exchange_of([]), one_host=True)
    assert meeting.host == "192.0.2.1"
    assert rendezvous.meeting_place(_exchange_of([]), one_host=False).device is None
    monkeypatch.delenv("MASTER_ADDR")
    assert rendezvous.meeting_place(_exchange_of([]), one_host=True).host == "127.0.0.1"


def test_the_timeout_comes_from_the_launcher_else_torchs_default(monkeypatch):
    monkeypatch.setenv(rendezvous.RENDEZVOUS_TIMEOUT_VARIABLE, "7.5")
    assert rendezvous.rendezvous_timeout() == datetime.timedelta(seconds=7.5)
    for bad in ("", "soon", "-1", "0"):
        monkeypatch.setenv(rendezvous.RENDEZVOUS_TIMEOUT_VARIABLE, bad)
        assert rendezvous.rendezvous_timeout() == rendezvous.DEFAULT_TIMEOUT


def test_a_failure_on_one_rank_is_the_same_message_on_every_rank():
    problems = [None, "The client socket has timed out after 5000ms", None]
    with pytest.raises(UsageError) as caught:
        rendezvous.agreed(_exchange_of(problems), "the store", lambda: "fine here")
    assert caught.value.agreed
    assert str(caught.value).startswith("the store: rank 1: The client socket has timed out")
    assert rendezvous.agreed(_exchange_of([None, None]), "the store", lambda: 3) == 3


def test_a_failing_step_keeps_the_first_line_of_torchs_message():
    def fails():
        raise RuntimeError("timed out connecting\nException raised from ...\nframe #0: ...")

    seen = []

    def exchange(mine):
        seen.append(mine)
        return [mine]

    with pytest.raises(UsageError, match="rank 0: timed out connecting; set MASTER_ADDR"):
        rendezvous.agreed(exchange, "the store", fails)
    assert seen == ["timed out connecting"]


def test_this_hosts_interfaces_leave_loopback_out():
    assert all(not i.address.startswith("127.") for i in rendezvous.local_interfaces())


def test_emulated_nodes_on_one_host_meet_on_loopback(monkeypatch):
    # --ranks-per-node on a host whose only interface is loopback (a bare container).
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    monkeypatch.setattr(rendezvous, "local_interfaces", lambda: [])
    meeting = rendezvous.meeting_place(_exchange_of([("vm", []), ("vm", [])]), one_host=False)
    assert (meeting.host, meeting.device) == ("127.0.0.1", rendezvous.LOOPBACK_INTERFACE)
