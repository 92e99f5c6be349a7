"""web.http.wsgi.read_body: a terminated stream (gunicorn's) read without
werkzeug's wrappers gives what werkzeug's `get_input_stream` gives."""

from __future__ import annotations

import io
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from werkzeug.exceptions import ClientDisconnected, RequestEntityTooLarge
from werkzeug.wsgi import get_input_stream

from web.http.wsgi import read_body


class Trickle:
    """A stream with only `read`, as gunicorn's: at most `step` bytes per read,
    then maybe a broken connection."""

    def __init__(self, data: bytes, step: int, breaks: bool) -> None:
        self._data, self._step, self._breaks = data, step, breaks

    def read(self, size: int = -1) -> bytes:
        if not self._data and self._breaks:
            raise OSError("connection reset")
        size = self._step if size < 0 else min(size, self._step)
        chunk, self._data = self._data[:size], self._data[size:]
        return chunk


def werkzeug_reads(environ: dict[str, Any], limit: int) -> object:
    try:
        body = get_input_stream(environ, max_content_length=limit + 1).read()
    except RequestEntityTooLarge:
        return None
    except ClientDisconnected:
        return "disconnected"
    return None if len(body) > limit else bytes(body)


def read_body_gives(environ: dict[str, Any], limit: int) -> object:
    try:
        return read_body(environ, limit)
    except ClientDisconnected:
        return "disconnected"


@settings(max_examples=500)
@given(
    data=st.binary(max_size=300),
    limit=st.integers(0, 200),
    step=st.integers(1, 80),
    breaks=st.booleans(),
    declared=st.none() | st.sampled_from(["-1", "x", " 5 ", "+3", "0"]) | st.integers(0, 400),
    chunked=st.booleans(),
    terminated=st.booleans(),
    whole=st.booleans(),
)
def test_read_body_reads_as_werkzeug_does(
    data: bytes,
    limit: int,
    step: int,
    breaks: bool,
    declared: object,
    chunked: bool,
    terminated: bool,
    whole: bool,
) -> None:
    def environ() -> dict[str, Any]:
        stream = io.BytesIO(data) if whole else Trickle(data, step, breaks)
        made: dict[str, Any] = {"wsgi.input": stream}
        if declared is not None:
            made["CONTENT_LENGTH"] = str(declared)
        if chunked:
            made["HTTP_TRANSFER_ENCODING"] = "chunked"
        if terminated:
            made["wsgi.input_terminated"] = True
        return made

    assert read_body_gives(environ(), limit) == werkzeug_reads(environ(), limit)
