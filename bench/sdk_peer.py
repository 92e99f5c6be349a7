"""The official a2a-sdk server, as the benchmarks' peer.

    uvicorn --factory bench.sdk_peer:create_app [--workers N]

A Starlette app with the SDK's DefaultRequestHandler, JSON-RPC routes (and its HTTP+JSON routes)
(A2A 1.0, with 0.3 compatibility), configured by the environment:

  BENCH_SDK_STORE  "memory" (InMemoryTaskStore, default) or a SQLAlchemy URL
                   (postgresql+asyncpg://...) for its DatabaseTaskStore
  BENCH_SDK_TABLE  that store's table, made beforehand by `prepare_table`
                   (so several workers never race to create it)
  BENCH_SDK_AGENT  "echo" (an artifact echoing the text, then completed:
                   bench/web.py), "streamer" (bench.agents.Plan: bench/streams.py)
                   "waiting" (a GET on bench/slow_http.py: bench/waiting.py)
                   or "due" (completed at a plan's due time: bench/long_poll.py)
  BENCH_SDK_URL    the URL the agent card names

This is the SDK's own code as its documentation shows it; nothing of the
project is used except the streamer's plan, so both servers stream the
same events.
"""

from __future__ import annotations

import asyncio
import os
import time
import warnings
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes, create_rest_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from starlette.applications import Starlette

from bench.agents import READY, Plan, counted, http_get, stamp


async def _submitted(context: RequestContext, queue: EventQueue) -> TaskUpdater:
    status = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
    task = Task(
        id=context.task_id,
        context_id=context.context_id,
        status=status,
        history=[context.message],
    )
    await queue.enqueue_event(task)
    return TaskUpdater(queue, context.task_id, context.context_id)


class Echo(AgentExecutor):
    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = await _submitted(context, queue)
        await updater.add_artifact([Part(text=context.get_user_input())], name="echo")
        await updater.complete()

    async def cancel(self, context: RequestContext, queue: EventQueue) -> None:
        await TaskUpdater(queue, context.task_id, context.context_id).cancel()


class Streamer(Echo):
    """bench.agents.streamer, as an SDK executor."""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        plan = Plan.decode(context.get_user_input())
        updater = await _submitted(context, queue)
        await updater.start_work(updater.new_agent_message([Part(text=READY)]))
        start = plan.go_time()
        while start is None:
            await asyncio.sleep(plan.poll)
            start = plan.go_time()
        for number in range(plan.events):
            await asyncio.sleep(max(0.0, plan.due(start, number) - time.time()))
            message = updater.new_agent_message([Part(text=stamp(number))])
            await updater.update_status(TaskState.TASK_STATE_WORKING, message=message)
        await updater.complete(updater.new_agent_message([Part(text="done")]))


class Due(Echo):
    """bench/long_poll.py's change, as an SDK executor: working until the go
    file says, then completed at the plan's due time with a stamped message."""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        plan = Plan.decode(context.get_user_input())
        updater = await _submitted(context, queue)
        await updater.start_work()
        start = plan.go_time()
        while start is None:
            await asyncio.sleep(plan.poll)
            start = plan.go_time()
        await asyncio.sleep(max(0.0, plan.due(start, 0) - time.time()))
        await updater.complete(updater.new_agent_message([Part(text=stamp(0))]))


class Waiting(Echo):
    """bench.agents.waiting, as an SDK executor: the same GET, then completed."""

    async def execute(self, context: RequestContext, queue: EventQueue) -> None:
        updater = await _submitted(context, queue)
        await updater.start_work()
        assert context.task_id is not None
        await http_get(counted(context.get_user_input(), context.task_id))
        await updater.add_artifact([Part(text="waited")], name="result")
        await updater.complete()


EXECUTORS: dict[str, type[Echo]] = {
    "echo": Echo,
    "streamer": Streamer,
    "waiting": Waiting,
    "due": Due,
}


# create_task_model re-declares the SDK's model class for a table of another
# name; SQLAlchemy warns about the replaced name on every start.
warnings.filterwarnings("ignore", message="This declarative base already contains")


def _store() -> Any:
    spec = os.environ.get("BENCH_SDK_STORE", "memory")
    if spec == "memory":
        return InMemoryTaskStore()
    from a2a.server.tasks import DatabaseTaskStore
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(spec, pool_size=20, max_overflow=20)
    return DatabaseTaskStore(engine, create_table=False, table_name=_table())


def _table() -> str:
    return os.environ.get("BENCH_SDK_TABLE", "bench_sdk_tasks")


def create_app() -> Starlette:
    url = os.environ.get("BENCH_SDK_URL", "http://127.0.0.1/")
    agent = os.environ.get("BENCH_SDK_AGENT", "echo")
    card = AgentCard(
        name="a2a-sdk peer",
        description="The official a2a-sdk server, for benchmarks",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id=agent, name=agent, description=agent, tags=["bench"])],
    )
    executor = EXECUTORS[agent]()
    handler = DefaultRequestHandler(agent_executor=executor, task_store=_store(), agent_card=card)
    routes = create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True)
    # Its HTTP+JSON routes too, after the others: their `/{tenant}` mount
    # would take any path with a segment.
    rest = create_rest_routes(handler)
    return Starlette(routes=[*create_agent_card_routes(card), *routes, *rest])


async def _on_table(url: str, table: str, drop: bool) -> None:
    from a2a.server.tasks import DatabaseTaskStore
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.execute(text(f'DROP TABLE IF EXISTS "{table}"'))
        if not drop:
            await DatabaseTaskStore(engine, create_table=True, table_name=table).initialize()
    finally:
        await engine.dispose()


def prepare_table(url: str, table: str) -> None:
    """A fresh, empty table for the DatabaseTaskStore."""
    asyncio.run(_on_table(url, table, drop=False))


def drop_table(url: str, table: str) -> None:
    asyncio.run(_on_table(url, table, drop=True))
