"""The ports tests hand their servers: no other xdist worker, and no connection, takes one."""

from __future__ import annotations

import itertools
import os
import socket

import pytest

from tests.support import ports
from tests.support.ports import block, ephemeral_range, free_port

WORKERS = ("gw0", "gw1", "gw2", "gw3", "gw4", "gw5", "gw6", None)


def test_each_worker_has_a_block_of_its_own_below_the_kernels_own_range() -> None:
    blocks = [set(block(worker)) for worker in WORKERS]
    for one, other in itertools.combinations(blocks, 2):
        assert not one & other
    lowest_ephemeral = ephemeral_range()[0]
    assert all(max(ports) < lowest_ephemeral and min(ports) >= 1024 for ports in blocks)


def test_a_port_handed_out_is_in_this_workers_block_and_never_handed_out_again() -> None:
    mine = block(os.environ.get("PYTEST_XDIST_WORKER"))
    handed = [free_port() for _ in range(300)]
    assert len(set(handed)) == len(handed)
    assert all(port in mine for port in handed)


def test_a_port_something_holds_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken, socket.socket() as spare:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        spare.bind(("127.0.0.1", 0))
        spare_port = spare.getsockname()[1]
        spare.close()  # free again: the one to be handed out
        monkeypatch.setattr(ports, "_NEXT", iter([taken.getsockname()[1], spare_port]))
        assert free_port() == spare_port
