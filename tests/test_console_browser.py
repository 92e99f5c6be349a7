"""The task console in headless Chromium, against `toolnexus-serve` (the
embedded server, console on by default) with its in-process worker running
tests/support/console_agent.py, and two principals (alice, bob); and once
against compose.yaml's services (gunicorn, a Celery worker, beat, Redis)
with the console turned on. The turn counts over the list are checked on an
in-process front end whose broker runs nothing, so tasks stay held.

Tasks are sent through the API by the official a2a-sdk client; what the
pages show is checked against what the API says. The run saves screenshots
of the list and of a task page into docs/img/ (docs/console.md shows them).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests
from a2a.client import ClientConfig, ClientFactory
from a2a.client.card_resolver import A2ACardResolver
from a2a.types import Message, Part, Role, SendMessageRequest

from shared import Settings, memory_store
from tests.support.a2a import wait_ready
from tests.support.browser import chromium
from tests.support.compose import local_stack
from tests.support.embedded import embedded_server
from tests.support.polling import wait_for
from tests.support.redis_server import ci
from tests.test_web_support import NoBroker, live_server
from web import create_app
from web.console.views import CONTENT_SECURITY_POLICY

try:
    from playwright.sync_api import expect
except ImportError:  # the test extra installs it
    if ci():
        raise
    pytest.skip("NO PLAYWRIGHT: pip install -e '.[test]'", allow_module_level=True)

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "docs" / "img"
TOKENS = {"alice": "alice-token", "bob": "bob-token"}
WAIT_MS = 20_000
PAGE = 25  # tasks per page of the list (console.js)
# Run in each page before its own script: the JSON-RPC id of every answer the
# page's code has read, in `window.answersRead`.
ANSWERS_READ = """
(() => {
  const read = (window.answersRead = []);
  const json = Response.prototype.json;
  Response.prototype.json = function () {
    return json.call(this).then((reply) => {
      read.push(reply && reply.id);
      return reply;
    });
  };
})();
"""
expect.set_options(timeout=WAIT_MS)


class Console:
    """The server under test, and what a client of its API would ask."""

    def __init__(self, base: str, gates: Path) -> None:
        self.base = base
        self.gates = gates

    def call(self, who: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {TOKENS[who]}"}
        reply = requests.post(f"{self.base}/", json=body, headers=headers, timeout=10).json()
        assert "result" in reply, reply
        result: dict[str, Any] = reply["result"]
        return result

    def task(self, who: str, task_id: str) -> dict[str, Any]:
        return self.call(who, "GetTask", {"id": task_id})

    def state(self, who: str, task_id: str) -> str:
        state: str = self.task(who, task_id)["status"]["state"]
        return state

    def listed(self, who: str) -> set[str]:
        return {task["id"] for task in self.call(who, "ListTasks", {"pageSize": 100})["tasks"]}

    def send(self, who: str, text: str) -> str:
        """Send `text` with the official SDK (non-blocking); the task's id. On
        a thread of its own: Playwright's sync API keeps this one's event loop."""
        with ThreadPoolExecutor(1) as thread:
            return thread.submit(asyncio.run, _sdk_send(self.base, TOKENS[who], text)).result()

    def settled(self, who: str, task_id: str, state: str) -> dict[str, Any]:
        return wait_for(
            lambda: (task := self.task(who, task_id))["status"]["state"] == state and task,
            timeout=20,
            what=f"task {task_id} to be {state}",
        )


async def _sdk_send(base: str, token: str, text: str) -> str:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(timeout=10, headers=headers) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
        message = Message(
            role=Role.ROLE_USER, message_id=str(uuid.uuid4()), parts=[Part(text=text)]
        )
        request = SendMessageRequest(message=message)
        request.configuration.return_immediately = True
        task_id = ""
        async for event in client.send_message(request):
            task_id = event.task.id
        await client.close()
    assert task_id
    return task_id


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    folder = tmp_path_factory.mktemp("console")
    gates = folder / "gates"
    gates.mkdir()
    env = {  # no TOOLNEXUS_CONSOLE: the embedded server serves the console by default
        "TOOLNEXUS_RUN": "tests.support.console_agent:run",
        "TOOLNEXUS_API_TOKENS": ",".join(f"{who}:{token}" for who, token in TOKENS.items()),
        "CONSOLE_GATES": str(gates),
    }
    with embedded_server(folder, env) as (host, port):
        yield Console(f"http://{host}:{port}", gates)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


class Tab:
    """One browser tab of its own (fresh session storage), recording every
    dialog, uncaught error and Content-Security-Policy report of its pages."""

    def __init__(self, browser: Any, console: Console) -> None:
        self.context = browser.new_context(accept_downloads=True)
        self.page = self.context.new_page()
        self.page.set_default_timeout(WAIT_MS)
        self.console = console
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.page.on("dialog", self._dialog)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))
        self.page.on("console", self._message)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _message(self, message: Any) -> None:
        if "Content Security Policy" in message.text or "Trusted Type" in message.text:
            self.errors.append(message.text)

    def open(self, path: str) -> Any:
        self.page.goto(self.console.base + path)
        return self.page

    def sign_in(self, who: str) -> Any:
        page = self.open("/console/")
        page.fill("#token", TOKENS[who])
        page.click("#sign-in button")
        page.wait_for_selector("#signed-in:not([hidden])")
        return page

    def listed(self) -> set[str]:
        """The task ids in the list, once it has loaded."""
        # Locators, not wait_for_function: the page's CSP forbids the eval that needs.
        expect(self.page.locator("#list-status")).to_have_text(re.compile("^(Tasks |No tasks)"))
        ids = self.page.locator("#tasks tbody tr td:first-child code").all_inner_texts()
        return set(ids)

    def row_state(self, task_id: str) -> Any:
        """The state shown in the task's row (a locator)."""
        return self.page.locator("#tasks tbody tr", has_text=task_id).locator(".state")

    def wait_state(self, state: str) -> None:
        self.page.wait_for_selector(f"#state .state-{state}")


@pytest.fixture
def tab(browser: Any, console: Console) -> Iterator[Tab]:
    opened = Tab(browser, console)
    yield opened
    opened.context.close()
    assert opened.errors == []  # no page error, no CSP or Trusted Types violation
    assert opened.dialogs == []


def test_the_list_shows_tasks_sent_through_the_api_with_their_states(
    console: Console, tab: Tab
) -> None:
    done = console.send("alice", "report the quarterly numbers")
    waiting = console.send("alice", "ask who")
    console.settled("alice", done, "TASK_STATE_COMPLETED")
    console.settled("alice", waiting, "TASK_STATE_INPUT_REQUIRED")
    tab.sign_in("alice")
    page = tab.page
    # The list refreshes by itself: it may have loaded before the last change.
    for task_id in (done, waiting):
        expect(page.locator("#tasks")).to_contain_text(task_id)
    assert {done, waiting} <= tab.listed()
    expect(tab.row_state(done)).to_have_text("completed")
    expect(tab.row_state(waiting)).to_have_text("input-required")
    row = page.locator("#tasks tbody tr", has=page.locator(f"text={done}"))
    assert "report the quarterly numbers" in row.inner_text()
    # The counts at the top are the API's totals for the caller.
    completed = console.call(
        "alice", "ListTasks", {"status": "TASK_STATE_COMPLETED", "pageSize": 1}
    )["totalSize"]
    count = page.locator("#counts li", has=page.locator(".state-completed"))
    expect(count).to_have_text(f"completed {completed}")
    # A filter by state shows only tasks in it.
    page.select_option("#filter-state", "input-required")
    page.click("#filters button")
    page.wait_for_url("**/console/?state=input-required*")
    assert waiting in tab.listed() and done not in tab.listed()
    assert set(page.locator("#tasks tbody .state").all_inner_texts()) == {"input-required"}
    tab.open("/console/")
    tab.listed()
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "console-tasks.png"), full_page=True)


def test_a_task_page_shows_data_as_json_and_files_as_downloads(console: Console, tab: Tab) -> None:
    task_id = console.send("alice", "report one two three")
    task = console.settled("alice", task_id, "TASK_STATE_COMPLETED")
    tab.sign_in("alice")
    page = tab.open(f"/console/tasks/{task_id}")
    tab.wait_state("completed")
    page.wait_for_selector("#transitions li >> text=completed")
    data = next(p["data"] for a in task["artifacts"] for p in a["parts"] if "data" in p)
    shown = page.locator("#artifacts pre.data").inner_text()
    assert json.loads(shown) == data == {"words": 3, "first": ["one"]}
    link = page.locator("#artifacts a[download]")
    assert link.inner_text() == "Download shout.txt"
    assert "text/plain" in page.locator("#artifacts .file").inner_text()
    with page.expect_download() as caught:
        link.click()
    download = caught.value
    assert download.suggested_filename == "shout.txt"
    assert Path(download.path()).read_bytes() == b"ONE TWO THREE"
    history = page.locator("#history > li").all_inner_texts()
    assert "report one two three" in history[0] and "Here is your report." in history[-1]
    states = page.locator("#transitions .state").all_inner_texts()
    assert states == ["submitted", "working", "completed"]
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / "console-task.png"), full_page=True)


def test_a_streaming_task_page_updates_without_reload_until_completed(
    console: Console, tab: Tab
) -> None:
    gate = f"gate-{uuid.uuid4().hex[:8]}"
    task_id = console.send("alice", f"gate {gate} slowly")
    tab.sign_in("alice")
    page = tab.open(f"/console/tasks/{task_id}")
    tab.wait_state("working")
    page.wait_for_selector(f"#status-message >> text=waiting for gate {gate}")
    expect(page.locator("#live")).to_have_text("Following the task live…")
    assert page.locator("#cancel").is_visible()
    page.evaluate("window.stillTheSamePage = true")
    (console.gates / gate).touch()
    tab.wait_state("completed")
    page.wait_for_selector("#artifacts >> text=through the gate")
    assert page.evaluate("window.stillTheSamePage") is True  # no reload happened
    assert page.locator("#transitions .state").all_inner_texts()[-1] == "completed"
    assert not page.locator("#cancel").is_visible()
    assert console.state("alice", task_id) == "TASK_STATE_COMPLETED"


def test_sending_from_the_console_creates_a_task_that_completes(console: Console, tab: Tab) -> None:
    page = tab.sign_in("alice")
    before = console.listed("alice")
    page.fill("#send-text", "hello from the console")
    note = {"name": "note.txt", "mimeType": "text/plain", "buffer": b"attached words"}
    page.set_input_files("#send-file", note)
    page.click("#send button[type=submit]")
    page.wait_for_url("**/console/tasks/**")
    tab.wait_state("completed")
    (task_id,) = console.listed("alice") - before
    assert page.url.endswith(f"/console/tasks/{task_id}")
    task = console.task("alice", task_id)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    sent = task["history"][0]["parts"]
    assert sent[0] == {"text": "hello from the console"}
    assert sent[1]["filename"] == "note.txt" and sent[1]["mediaType"] == "text/plain"
    assert base64.b64decode(sent[1]["raw"]) == b"attached words"
    page.wait_for_selector("#history >> text=ran: hello from the console")
    # An agent that answers with a message makes no task page: the answer is shown.
    page.goto(f"{console.base}/console/")
    page.fill("#send-text", "reply <b>bold</b> words")
    page.click("#send button[type=submit]")
    expect(page.locator("#send-result")).to_contain_text("answered with a message")
    expect(page.locator("#send-result .messages")).to_contain_text("You said: <b>bold</b> words")
    assert page.url == f"{console.base}/console/"


def test_a_reply_to_an_input_required_task_continues_it(console: Console, tab: Tab) -> None:
    task_id = console.send("alice", "ask me something")
    console.settled("alice", task_id, "TASK_STATE_INPUT_REQUIRED")
    tab.sign_in("alice")
    page = tab.open(f"/console/tasks/{task_id}")
    tab.wait_state("input-required")
    page.wait_for_selector("#status-message >> text=What is your name?")
    page.fill("#reply-text", "Ada")
    page.click("#reply button[type=submit]")
    tab.wait_state("completed")
    page.wait_for_selector("#history >> text=Hello, Ada!")
    task = console.task("alice", task_id)
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    said = [part.get("text") for message in task["history"] for part in message["parts"]]
    assert "Ada" in said and "Hello, Ada!" in said
    states = page.locator("#transitions .state").all_inner_texts()
    assert states[-3:] == ["input-required", "working", "completed"]
    assert not page.locator("#reply").is_visible()


def test_a_script_in_a_message_is_shown_as_text_and_never_runs(console: Console, tab: Tab) -> None:
    hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>"
    task_id = console.send("alice", hostile)
    console.settled("alice", task_id, "TASK_STATE_COMPLETED")
    page = tab.sign_in("alice")
    page.wait_for_selector(f"#tasks >> text={task_id}")
    assert hostile in page.locator("#tasks").inner_text()
    response = page.goto(f"{console.base}/console/tasks/{task_id}")
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    tab.wait_state("completed")
    page.wait_for_selector("#transitions li >> text=completed")
    assert hostile in page.locator("#history").inner_text()
    assert f"ran: {hostile}" in page.locator("#artifacts").inner_text()
    # Nothing the task said became an element: the page's one script and no images.
    scripts = page.evaluate("[...document.scripts].map(s => new URL(s.src).pathname)")
    assert scripts == ["/console/static/console.js"]
    assert page.locator("img").count() == 0
    # And the policy holds even against the page's own code: an inline script
    # (the way injected markup would run) is refused by Trusted Types and CSP.
    ran = page.evaluate(
        """() => {
            const script = document.createElement('script');
            try { script.text = 'window.injected = true'; } catch (error) { return 'refused'; }
            document.body.append(script);
            return window.injected === true ? 'ran' : 'blocked';
        }"""
    )
    assert ran == "refused"
    tab.errors.clear()  # the refusal above is reported as a violation, as it should be
    # A file given by URL is a link only when the URL is http(s).
    linked = console.send("alice", "links")
    console.settled("alice", linked, "TASK_STATE_COMPLETED")
    page.goto(f"{console.base}/console/tasks/{linked}")
    tab.wait_state("completed")
    hrefs = page.locator("#artifacts a").evaluate_all("links => links.map(a => a.href)")
    assert hrefs == ["https://files.example/report.txt"]
    assert (
        "trap.txt (media type not given) at javascript:alert(3)"
        in page.locator("#artifacts").inner_text()
    )


def test_each_principal_sees_only_its_own_tasks(browser: Any, console: Console, tab: Tab) -> None:
    alices = console.send("alice", "alice's own words")
    bobs = console.send("bob", "bob's own words")
    console.settled("alice", alices, "TASK_STATE_COMPLETED")
    console.settled("bob", bobs, "TASK_STATE_COMPLETED")
    tab.sign_in("alice")
    seen_by_alice = tab.listed()
    bob = Tab(browser, console)
    try:
        bob.sign_in("bob")
        seen_by_bob = bob.listed()
        assert seen_by_bob == console.listed("bob") and bobs in seen_by_bob
        # Bob's tab asks for Alice's task by its id: the API says no such task.
        page = bob.open(f"/console/tasks/{alices}")
        page.wait_for_selector("#notice:not([hidden])")
        assert "not found" in page.locator("#notice").inner_text().lower()
        assert page.locator("#history li").count() == 0
        assert bob.errors == [] and bob.dialogs == []
    finally:
        bob.context.close()
    assert seen_by_alice == console.listed("alice") and alices in seen_by_alice
    assert not seen_by_alice & seen_by_bob
    # Signed out, the tab holds no token and the API refuses it.
    tab.open("/console/")
    tab.page.click("#sign-out")
    tab.page.wait_for_selector("#notice:not([hidden])")
    assert "needs a token" in tab.page.locator("#notice").inner_text()
    assert tab.page.evaluate("sessionStorage.length") == 0


def test_a_sign_out_during_a_slow_load_is_not_undone_by_that_load(
    console: Console, tab: Tab
) -> None:
    """A signed-in load's list and counts calls are paused in the network
    until after the sign-out's own load has shown its refusal; their
    answers, let through then, must not show the list again nor clear the
    refusal (they did: the last answer to arrive won, whichever load it
    belonged to)."""
    theirs = console.send("alice", "alice's listing")
    console.settled("alice", theirs, "TASK_STATE_COMPLETED")
    tab.sign_in("alice")
    tab.listed()
    page = tab.page
    states = [
        v
        for v in page.locator("#filter-state option").evaluate_all(
            "(options) => options.map((o) => o.value)"
        )
        if v
    ]
    signed: list[Any] = []  # every signed ListTasks of the load, paused

    def pause_the_signed_in(route: Any) -> None:
        if "authorization" in route.request.headers and "ListTasks" in (
            route.request.post_data or ""
        ):
            signed.append(route)
        else:
            route.continue_()

    page.route(f"{console.base}/", pause_the_signed_in)
    page.add_init_script(script=ANSWERS_READ)
    page.reload()
    # Its list and one count per state, sent with the token, now paused (the
    # probe also pumps Playwright's events: route handlers run inside its calls).
    wait_for(
        lambda: len(signed) >= 1 + len(states) or page.wait_for_timeout(20),
        timeout=30,
        what="the signed-in load's calls",
    )
    page.click("#sign-out")
    page.wait_for_selector("#notice:not([hidden])")
    paused = list(signed)
    stale = {json.loads(route.request.post_data or "{}")["id"] for route in paused}
    for route in paused:
        route.continue_()
    for route in paused:
        route.request.response().finished()  # the network has given every stale answer
    # The page's code has read each of them: the rest of its handling (the
    # drop) runs in that same turn of the page's event loop, before this looks.
    wait_for(
        lambda: stale <= set(page.evaluate("window.answersRead")),
        timeout=30,
        what="the page to read the stale answers",
    )
    assert page.locator("#notice").is_visible()
    assert "needs a token" in page.locator("#notice").inner_text()
    assert page.locator("#tasks tbody tr").count() == 0
    assert page.locator("#counts li").count() == 0
    assert page.locator("#list-status").inner_text() == "Loading…"


def test_the_list_refreshes_by_itself_when_a_task_arrives(console: Console, tab: Tab) -> None:
    tab.sign_in("alice")
    tab.listed()
    tab.page.evaluate("window.stillTheSamePage = true")
    arrived = console.send("alice", "report arriving later")
    expect(tab.page.locator("#tasks")).to_contain_text(arrived)
    expect(tab.row_state(arrived)).to_have_text("completed")
    assert tab.page.evaluate("window.stillTheSamePage") is True


def test_cancel_from_the_console_cancels_the_task(console: Console, tab: Tab) -> None:
    gate = f"gate-{uuid.uuid4().hex[:8]}"
    task_id = console.send("alice", f"gate {gate} never opened in time")
    tab.sign_in("alice")
    page = tab.open(f"/console/tasks/{task_id}")
    tab.wait_state("working")
    try:
        page.click("#cancel")
        tab.wait_state("canceled")
        assert console.state("alice", task_id) == "TASK_STATE_CANCELED"
        expect(page.locator("#cancel")).to_be_hidden()
        expect(page.locator("#transitions .state").last).to_have_text("canceled")
    finally:
        (console.gates / gate).touch()  # the agent's thread goes free


def test_the_console_works_from_the_keyboard_and_refuses_a_wrong_token(
    console: Console, tab: Tab
) -> None:
    task_id = console.send("alice", "report by keyboard")
    console.settled("alice", task_id, "TASK_STATE_COMPLETED")
    page = tab.open("/")  # the server's root, as a browser asks for it, leads to the console
    page.get_by_role("link", name="task console").click()
    page.wait_for_url(f"{console.base}/console/")
    page.wait_for_selector("#notice:not([hidden])")  # the API asked for a token...
    assert page.evaluate("document.activeElement.id") == "token"  # ...and the field has focus
    page.keyboard.type("not-a-token")
    page.keyboard.press("Enter")
    expect(page.locator("#notice")).to_contain_text("refused that token")
    assert page.evaluate("sessionStorage.length") == 0
    page.focus("#token")
    page.keyboard.type(TOKENS["alice"])
    page.keyboard.press("Enter")
    page.locator("#tasks a", has_text=task_id).focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/console/tasks/{task_id}")
    tab.wait_state("completed")


def test_the_list_shows_the_callers_tasks_waiting_for_their_turn(
    browser: Any, tmp_path: Path
) -> None:
    """The counts line over the list (GET /console/api/turns): a front end
    whose broker runs nothing and where no worker registered its slots takes
    one task into flight and holds the rest. Alice sees her own counts; Bob,
    an administrator here (TOOLNEXUS_ADMIN_TOKENS), every owner's."""
    settings = Settings(
        console=True,
        api_tokens=tuple(f"{who}:{token}" for who, token in TOKENS.items()),
        admin_tokens=("bob",),
    )
    app = create_app(settings, store=memory_store(), dispatcher=NoBroker())
    with live_server(app) as (base, _):
        turns = Console(base, tmp_path)
        for n in range(3):
            message = {
                "role": "ROLE_USER",
                "messageId": uuid.uuid4().hex,
                "parts": [{"text": f"{n}"}],
            }
            params = {"message": message, "configuration": {"returnImmediately": True}}
            turns.call("alice", "SendMessage", params)
        alice, bob = Tab(browser, turns), Tab(browser, turns)
        try:
            alice.sign_in("alice")
            mine = "Your tasks: 2 waiting for their turn, 1 running or queued."
            expect(alice.page.locator("#turns-mine")).to_have_text(mine)
            assert alice.page.locator("#turns-owners").count() == 0
            bob.sign_in("bob")
            expect(bob.page.locator("#turns-mine")).to_have_text(
                "Your tasks: 0 waiting for their turn, 0 running or queued."
            )
            row = bob.page.locator("#turns-owners tbody tr", has_text="alice")
            expect(row).to_have_text(re.compile(r"alice\s*2\s*1"))
            for tab in (alice, bob):
                assert tab.errors == [] and tab.dialogs == []
        finally:
            alice.context.close()
            bob.context.close()


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """compose.yaml's web (gunicorn, gevent), worker and beat on a private
    Redis, with the console turned on as a compose user would."""
    folder = tmp_path_factory.mktemp("console-deployed")
    gates = folder / "gates"
    gates.mkdir()
    overrides = {
        "TOOLNEXUS_CONSOLE": "true",
        "TOOLNEXUS_RUN": "tests.support.console_agent:run",
        "TOOLNEXUS_API_TOKENS": ",".join(f"{who}:{token}" for who, token in TOKENS.items()),
    }
    with local_stack(folder, overrides) as (_, stack):
        stack.start("web", WEB_CONCURRENCY="1")
        stack.start("worker", CONSOLE_GATES=str(gates), PYTHONPATH=str(ROOT))
        stack.start("beat", PYTHONPATH=str(ROOT))  # beat loads the agent's hook too
        wait_ready(stack.web_url)
        yield Console(stack.web_url, gates)


def test_on_the_compose_stack_a_message_sent_from_the_console_streams_to_completed(
    browser: Any, deployed: Console
) -> None:
    tab = Tab(browser, deployed)
    try:
        page = tab.sign_in("alice")
        gate = f"gate-{uuid.uuid4().hex[:8]}"
        page.fill("#send-text", f"gate {gate} through celery")
        page.click("#send button[type=submit]")
        page.wait_for_url("**/console/tasks/**")
        tab.wait_state("working")
        page.wait_for_selector(f"#status-message >> text=waiting for gate {gate}")
        page.evaluate("window.stillTheSamePage = true")
        (deployed.gates / gate).touch()
        tab.wait_state("completed")
        assert page.evaluate("window.stillTheSamePage") is True
        task_id = page.url.rsplit("/", 1)[-1]
        assert deployed.state("alice", task_id) == "TASK_STATE_COMPLETED"
        assert deployed.listed("bob") & {task_id} == set()
        page.click("text=All tasks")
        expect(tab.row_state(task_id)).to_have_text("completed")
        assert tab.errors == [] and tab.dialogs == []
    finally:
        tab.context.close()


def test_the_list_pages_through_listtasks(console: Console, tab: Tab) -> None:
    listed = console.call("alice", "ListTasks", {"pageSize": 1})["totalSize"]
    sent = [console.send("alice", f"page filler {n}") for n in range(max(0, PAGE + 1 - listed))]
    for task_id in sent:
        console.settled("alice", task_id, "TASK_STATE_COMPLETED")
    everything = console.listed("alice")
    tab.sign_in("alice")
    page = tab.page
    first = tab.listed()
    assert len(first) == PAGE
    page.click("#older")
    expect(page.locator("#list-status")).to_have_text(re.compile(f"^Tasks {PAGE + 1} to "))
    second = tab.listed()
    assert first.isdisjoint(second) and first | second <= everything
    assert len(first | second) == min(len(everything), 2 * PAGE)
    page.click("#newer")
    expect(page.locator("#list-status")).to_have_text(re.compile("^Tasks 1 to "))
    assert tab.listed() == first
    assert page.locator("#newer").is_disabled()
