"""An OpenAI Agents SDK agent, served as it is, on an offline model.

    TOOLNEXUS_RUN=examples.frameworks.openai_agents_agent:agent toolnexus-serve

`agent` is a plain `agents.Agent`: the service recognizes it and streams its
answer. Try `weather in Paris` (a tool call, seen as progress), `book Chez
Léon` (a tool that needs approval: the task asks, answer `yes` or `no`),
`forecast Oslo` (a handoff to an agent with a structured output), `my name is
Ada` then `what is my name?` in the same context, `count to 30` (slow: cancel
it). The model is `OfflineModel` (examples/frameworks/openai_agents_model.py):
no network, no key. With a real one, drop `model=` and set OPENAI_API_KEY.
"""

from __future__ import annotations

import os

from agents import Agent, function_tool, set_tracing_disabled
from pydantic import BaseModel

from examples.frameworks.openai_agents_model import OfflineModel

# Traces would go to OpenAI's servers; this example stays offline.
set_tracing_disabled(True)


class Forecast(BaseModel):
    city: str
    sky: str
    high_c: int


@function_tool
def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return f"It is sunny and 21 °C in {city} (looked up by process {os.getpid()})."


@function_tool(needs_approval=True)
def book_table(restaurant: str, people: int) -> str:
    """Book a table at a restaurant; the user approves it first."""
    return f"Booked a table for {people} at {restaurant} (booked by process {os.getpid()})."


forecaster = Agent(
    name="forecaster",
    handoff_description="Gives a city's forecast as data.",
    instructions="Answer with the forecast for the city asked about.",
    model=OfflineModel(),
    output_type=Forecast,
)

agent = Agent(
    name="concierge",
    instructions="You help with the weather and with restaurant bookings.",
    model=OfflineModel(),
    tools=[get_weather, book_table],
    handoffs=[forecaster],
)
