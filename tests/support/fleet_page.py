"""The console's fleet page in a browser tab, as the fleet page's tests read
it: what each uPlot chart draws (`window.fleetCharts`), read with
`page.evaluate` (the page's policy forbids the eval a `wait_for_function`
needs), and every page error or policy report it met."""

from __future__ import annotations

import time
from typing import Any

# The page's charts, by the id of their box (`#chart-<name>`).
CHARTS = ("rates", "latency", "queue", "owners", "workers")
WAIT_MS = 30_000


class FleetTab:
    """One tab of its own, signed in with `token` on the fleet page,
    recording every uncaught error and Content-Security-Policy report."""

    def __init__(self, browser: Any, base: str, token: str) -> None:
        self.context = browser.new_context()
        self.page = self.context.new_page()
        self.page.set_default_timeout(WAIT_MS)
        self.errors: list[str] = []
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("console", self._message)
        self.page.goto(f"{base}/console/fleet")
        self.page.fill("#token", token)
        self.page.click("#sign-in button")
        self.page.wait_for_selector("#signed-in:not([hidden])")

    def _message(self, message: Any) -> None:
        if "Content Security Policy" in message.text or "Trusted Type" in message.text:
            self.errors.append(message.text)

    def samples(self) -> int:
        return int(self.page.locator("body").get_attribute("data-samples") or 0)

    def wait_samples(self, count: int) -> None:
        deadline = time.monotonic() + WAIT_MS / 1000
        while self.samples() < count:
            assert time.monotonic() < deadline, f"the page never had {count} samples"
            self.page.wait_for_timeout(200)

    def wait_until(self, done: Any, what: str) -> None:
        deadline = time.monotonic() + WAIT_MS / 1000
        while not done():
            assert time.monotonic() < deadline, f"the page never showed {what}"
            self.page.wait_for_timeout(250)

    def series(self, chart: str) -> dict[str, list[float]]:
        """Each series of the chart by its label, its gaps as 0."""
        drawn = self.drawn(chart)
        columns = drawn["data"][1:]
        return {
            label: [value or 0 for value in column]
            for label, column in zip(drawn["labels"], columns, strict=True)
        }

    def drawn(self, chart: str) -> dict[str, Any]:
        """What the chart draws: its series' labels and its data columns."""
        found: dict[str, Any] = self.page.evaluate(
            """(name) => {
                const plot = window.fleetCharts[name].plot;
                return { labels: plot.series.slice(1).map((s) => s.label), data: plot.data };
            }""",
            chart,
        )
        return found

    def close(self) -> None:
        self.context.close()
        assert self.errors == []  # no page error, no CSP or Trusted Types violation
