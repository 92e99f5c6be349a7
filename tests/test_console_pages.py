"""The console's pages as HTTP sees them (web/console/views.py), in process: when it
is served, the headers every page carries, escaping in what the server
renders, `GET /` for browsers, and the Origin rule for its own pages. What
the pages do in a browser: tests/test_console_browser.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import requests

from shared import Settings, memory_store
from shared.stores.file.store import file_store
from shared.stores.memory.store import MemoryStore
from shared.stores.redis.store import redis_store
from tests.support.embedded import embedded_server
from tests.test_security_browsers import client_for, send
from tests.test_web_support import PlayingDispatcher
from web import create_app
from web.console.views import CONTENT_SECURITY_POLICY

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
PAGES = ("/console/", "/console/tasks/some-task", "/console/static/console.js")


def test_the_console_is_off_unless_turned_on() -> None:
    assert Settings().console is False
    assert Settings.from_env({"TOOLNEXUS_CONSOLE": "true"}).console is True
    off = client_for(Settings())
    assert off.get("/console/").status_code == 404
    index = off.get("/", headers={"Accept": BROWSER_ACCEPT})
    assert index.mimetype == "application/json"  # no page links to a console that is not there


def test_the_embedded_server_serves_it_unless_told_not_to(tmp_path: Path) -> None:
    """On by default: tests/test_console_browser.py runs toolnexus-serve without the setting."""
    with embedded_server(tmp_path, {"TOOLNEXUS_CONSOLE": "false"}) as (host, port):
        assert requests.get(f"http://{host}:{port}/console/", timeout=10).status_code == 404


@pytest.mark.parametrize("path", PAGES)
def test_every_console_response_carries_a_strict_policy(path: str) -> None:
    response = client_for(Settings(console=True)).get(path)
    assert response.status_code == 200
    assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    policy = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert policy["default-src"] == "'none'"
    assert policy["script-src"] == "'self'"  # no inline script, no eval, no other host
    assert policy["frame-ancestors"] == "'none'"
    assert policy["require-trusted-types-for"] == "'script'"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["Referrer-Policy"] == "no-referrer"


def test_the_pages_hold_no_inline_script_and_escape_what_they_render() -> None:
    client = client_for(Settings(console=True, name="<b>agent</b>"))
    page = client.get("/console/tasks/%3Cscript%3Ealert(1)%3C%2Fscript%3E").get_data(as_text=True)
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page
    assert "<b>agent</b>" not in page and "&lt;b&gt;agent&lt;/b&gt;" in page
    listing = client.get("/console/?state=bogus&context=%22%3E%3Cscript%3E").get_data(as_text=True)
    assert '"><script>' not in listing and "&#34;&gt;&lt;script&gt;" in listing
    for html in (page, listing):
        scripts = html.count("<script")
        assert scripts == 1 and '<script src="/console/static/console.js" defer></script>' in html
        assert re.search(r"\son[a-z]+\s*=", html) is None  # no inline event handler
        assert "style=" not in html


def test_a_browser_asking_for_the_root_is_shown_the_way_to_the_console() -> None:
    client = client_for(Settings(console=True))
    page = client.get("/", headers={"Accept": BROWSER_ACCEPT})
    assert page.mimetype == "text/html"
    assert page.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    html = page.get_data(as_text=True)
    assert 'href="/console/"' in html and 'href="/.well-known/agent-card.json"' in html
    for accept in ("*/*", "application/json", None):
        headers = {"Accept": accept} if accept else {}
        assert client.get("/", headers=headers).get_json()["agentCard"]  # clients: JSON as before
    bare = client.get("/console")
    assert bare.status_code == 308 and bare.headers["Location"].endswith("/console/")


def test_the_consoles_own_pages_may_call_the_api_and_no_other_origin_may() -> None:
    console = client_for(Settings(console=True))
    assert send(console, Origin="http://localhost", Host="localhost").status_code == 200
    assert send(console, Origin="http://127.0.0.1:8080", Host="127.0.0.1:8080").status_code == 200
    # A page elsewhere, or on another port of this host, is another origin.
    assert send(console, Origin="http://evil.example", Host="localhost").status_code == 403
    assert send(console, Origin="http://localhost:9999", Host="localhost:8080").status_code == 403
    # DNS rebinding: the attacker's name, re-pointed here, is same-origin but not trusted.
    rebound = send(console, Origin="http://evil.example", Host="evil.example")
    assert rebound.status_code == 403
    assert "TOOLNEXUS_ALLOWED_HOSTS" in rebound.get_json()["error"]["message"]
    named = client_for(Settings(console=True, allowed_hosts=("agent.example.com",)))
    ok = send(named, Origin="https://agent.example.com", Host="agent.example.com")
    assert ok.status_code == 200
    # Without the console no page of this server calls it: the rule stays as it was.
    plain = client_for(Settings())
    assert send(plain, Origin="http://localhost", Host="localhost").status_code == 403


def test_every_control_on_the_pages_has_a_label() -> None:
    client = client_for(Settings(console=True))
    for path in ("/console/", "/console/tasks/t-1"):
        html = client.get(path).get_data(as_text=True)
        controls = re.findall(r"<(?:input|select|textarea)\b[^>]*\bid=\"([^\"]+)\"", html)
        labelled = set(re.findall(r"<label for=\"([^\"]+)\"", html))
        assert controls and set(controls) <= labelled, path
        assert re.search(r"<html lang=\"en\">", html)


def test_the_list_says_when_the_store_reads_every_task_to_list(
    tmp_path: Path, redis_url: str
) -> None:
    said = "lists by reading every task"

    class Scanning(MemoryStore):
        lists_by_scan = True  # as a store without an index of its own says

    for store, scans in (
        (memory_store(), False),
        (file_store(tmp_path), False),
        (redis_store(redis_url), False),
        (Scanning(), True),
    ):
        app = create_app(Settings(console=True), store=store, dispatcher=PlayingDispatcher(store))
        page = app.test_client().get("/console/").get_data(as_text=True)
        assert (said in page) is scans, store
