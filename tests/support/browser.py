"""Headless Chromium (Debian's `chromium`) driven by Playwright, for the
console's browser tests. No browser is downloaded: Playwright drives the
system's. Where either is missing the tests skip saying so; under `CI=true`
they fail instead (.ci/run installs both)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from tests.support.redis_server import ci

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)


def _missing(what: str) -> None:
    message = f"NO BROWSER: {what}; the console's browser tests need it (.ci/run installs it)"
    if ci():
        pytest.fail(message)
    pytest.skip(f"{message}: skipped")


@contextmanager
def chromium() -> Iterator[Any]:
    """One browser, closed afterwards. Playwright's `launch` gives it a fresh
    profile (user-data-dir) of its own, deleted when it closes."""
    executable = shutil.which("chromium")
    if executable is None:
        _missing("no `chromium` on PATH (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the `playwright` package is not installed")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=list(FLAGS))
        try:
            yield browser
        finally:
            browser.close()
