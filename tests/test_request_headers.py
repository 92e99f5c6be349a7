"""The embedded server reads a request's headers as gevent itself would
(`http.client.parse_headers` into gevent's `OldMessage`), only faster for
plain blocks: both ways compared on generated header blocks, plain and not
(folded lines, stray CRs, blanks, odd names, bytes above ASCII, too long,
too many), down to the stored fields, the status, what is left unread, what
`get` answers for every name (before and after a field is removed, as gevent
removes a chunked request's length) and the environment's `HTTP_*` items."""

from __future__ import annotations

import http.client
import io
from typing import Any

import gevent.pywsgi
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from web.http.gevent_server import JsonErrorHandler
from web.http.request_headers import parse_request_headers


def test_what_the_reader_relies_on_is_still_there() -> None:
    assert callable(getattr(http.client, "_read_headers", None)), "http.client._read_headers"
    assert isinstance(getattr(gevent.pywsgi, "OldMessage", None), type), "gevent's OldMessage"
    assert callable(getattr(gevent.pywsgi, "headers_factory", None)), "gevent's headers_factory"


def answers(message: Any, handler: type[gevent.pywsgi.WSGIHandler]) -> Any:
    """What gevent asks of a message: the fields, `get` of each name (in other
    cases too, and some absent), and the handler's `HTTP_*` items; again
    after the length is removed, if any."""
    names = {name for name, _ in message._headers}
    names |= {name.upper() for name in names} | {name.lower() for name in names}
    names |= {"content-length", "Content-Type", "connection", "absent"}

    def read() -> Any:
        got = sorted((name, message.get(name, "none")) for name in names)
        reading = object.__new__(handler)  # a handler with nothing but the headers read
        reading.headers = message
        items = list(reading._headers())
        return (list(message._headers), list(message.headers), got, items, message.typeheader)

    before = read()
    if message.get("content-length") is None:
        return before, None
    del message["content-length"]
    return before, read()


def both_ways(raw: bytes) -> tuple[Any, Any]:
    """(gevent's own reading, this module's), each with what it left unread."""
    outcomes = []
    for reader, handler in (
        (gevent.pywsgi.headers_factory, gevent.pywsgi.WSGIHandler),
        (parse_request_headers, JsonErrorHandler),
    ):
        stream = io.BytesIO(raw)
        try:
            message = reader(stream)
            outcome: Any = (message.status, answers(message, handler))
        except http.client.HTTPException as error:
            outcome = (type(error), str(error))
        outcomes.append((outcome, stream.read()))
    return outcomes[0], outcomes[1]


NAME = st.text(alphabet="!#$%&'*+-.^_`|~abcXYZ019", min_size=1, max_size=8)
ODD = st.sampled_from(
    ["", " ", "\t", ":", "\r", "\n", "\r\n", "From ", " x", "é", "\x85", "\x00", "\u00ff"]
)
VALUE = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=255), max_size=12)
LINE = st.one_of(
    st.builds(
        lambda n, v: f"{n}: {v}\r\n", NAME, VALUE.filter(lambda v: not set(v) & {"\r", "\n"})
    ),
    st.builds(
        lambda n, s, v: f"{n}:{s}{v}\n", NAME, st.sampled_from(["", " ", "\t ", "  "]), VALUE
    ),
    st.builds(lambda a, b, c: a + b + c, ODD, VALUE, ODD),
)


@settings(max_examples=400, deadline=None)
@given(
    lines=st.lists(LINE, max_size=6),
    end=st.sampled_from(["\r\n", "\n", ""]),
    body=st.sampled_from(["", "GET / HTTP/1.1\r\n", '{"a": 1}']),
)
def test_both_ways_read_the_same_from_any_header_block(
    lines: list[str], end: str, body: str
) -> None:
    raw = ("".join(lines) + end + body).encode("iso-8859-1")
    gevents, ours = both_ways(raw)
    assert ours == gevents, raw


@pytest.mark.parametrize(
    "raw",
    [
        b"Host: x\r\nContent-Length: 5\r\nA2A-Version: 1.0\r\n\r\nhello",
        b"Host: x\r\ncontent-length: 5\r\nCONTENT-LENGTH: 6\r\nX_Under: 1\r\nA: b \t\r\n\r\n",
        b"Host: x\r\nX-Folded: one\r\n two\r\n\r\n",
        b"Host: x\r\n" + b"X: " + b"a" * 70000 + b"\r\n\r\n",
        b"".join(b"X-%d: v\r\n" % n for n in range(101)) + b"\r\n",
        b"Host: x\r\nBad Name: v\r\n\r\n",
        b"Host: x\r\n",
    ],
    ids=["plain", "repeated", "folded", "too-long", "too-many", "space-in-name", "no-end"],
)
def test_both_ways_read_the_same_from_these_blocks(raw: bytes) -> None:
    gevents, ours = both_ways(raw)
    assert ours == gevents
