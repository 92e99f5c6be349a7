"""Flower as the tests watch it: whether it has heard a worker yet."""

from __future__ import annotations

import requests

from tests.support.compose import LocalStack


def flower_workers_alive(stack: LocalStack, login: tuple[str, str]) -> dict[str, bool]:
    """Flower's event state of the workers (name -> alive), empty while Flower
    is not up or has heard no event yet. Flower binds its event queue before it
    hears anything, so a worker heard means every event sent from now on
    (beat's task-sent included, which alone carries the routing key) reaches
    Flower; one sent before that is gone: a task sent while Flower was still
    starting never shows in it."""
    try:
        reply = requests.get(
            f"{stack.flower_url}/api/workers", params={"status": "1"}, auth=login, timeout=10
        )
    except requests.ConnectionError:
        return {}
    assert reply.status_code == 200, reply.text[:300]
    alive: dict[str, bool] = reply.json()
    return alive
