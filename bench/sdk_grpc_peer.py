"""The official a2a-sdk's gRPC server, in memory, as bench/grpc_load.py's peer.

    python -m bench.sdk_grpc_peer PORT

Its GrpcHandler over a DefaultRequestHandler with the InMemoryTaskStore and
bench/sdk_peer.py's echo agent, on grpc.aio, as the SDK's documentation
shows it; nothing of the project is used.
"""

from __future__ import annotations

import asyncio
import sys

import grpc
from a2a.server.request_handlers import DefaultRequestHandler, GrpcHandler
from a2a.server.tasks import InMemoryTaskStore
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    a2a_pb2_grpc,
)

from bench.sdk_peer import Echo


async def serve(port: int) -> None:
    card = AgentCard(
        name="a2a-sdk gRPC peer",
        description="The official a2a-sdk gRPC server, for benchmarks",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=f"127.0.0.1:{port}", protocol_binding="GRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[AgentSkill(id="echo", name="echo", description="echo", tags=["bench"])],
    )
    handler = DefaultRequestHandler(
        agent_executor=Echo(), task_store=InMemoryTaskStore(), agent_card=card
    )
    server = grpc.aio.server()
    a2a_pb2_grpc.add_A2AServiceServicer_to_server(GrpcHandler(handler), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(serve(int(sys.argv[1])))
