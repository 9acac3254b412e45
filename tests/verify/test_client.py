"""The asyncio HTTP/1.1 + SSE client against an in-process server."""

from __future__ import annotations

import asyncio

import pytest
from pdfleet.verify import client
from pdfleet.verify.client import SSEParser, StreamSession, chat_body

from .fakeserver import FakeServer


def test_sse_parser_handles_split_events_and_crlf() -> None:
    p = SSEParser()
    assert p.feed(b"data: {\"a\"") == []
    assert p.feed(b": 1}\r\n\r\ndata: [DONE]\n\n") == [b'{"a": 1}', b"[DONE]"]


def test_split_url_rejects_https() -> None:
    assert client.split_url("http://127.0.0.1:8000/x?y=1") == ("127.0.0.1", 8000, "/x?y=1")
    with pytest.raises(client.HTTPClientError):
        client.split_url("https://127.0.0.1/")


def test_request_and_stream() -> None:
    async def go() -> None:
        srv = await FakeServer(tokens=4).start()
        try:
            r = await client.request(srv.url + "/plain")
            assert r.status == 200 and r.json() == {"ok": True}
            r = await client.request(srv.url + "/missing")
            assert r.status == 404
            s = StreamSession(0, srv.url + "/v1/chat/completions", chat_body("m", "hi", 4, True))
            await s.run()
            assert s.phase == "completed" and s.tokens == 4 and s.usage == {"completion_tokens": 4}
            assert s.first_token_s is not None and s.tpot_s is not None and s.completion_id == "chatcmpl-s"
        finally:
            await srv.stop()

    asyncio.run(go())


def test_connection_refused_is_an_error() -> None:
    async def go() -> None:
        srv = await FakeServer().start()
        url = srv.url
        await srv.stop()
        with pytest.raises(client.HTTPClientError):
            await client.request(url + "/plain", timeout_s=2)

    asyncio.run(go())


@pytest.mark.parametrize("rst", [True, False])
def test_kill_mid_stream_is_seen_by_the_server(rst: bool) -> None:
    async def go() -> None:
        srv = await FakeServer(tokens=1000, interval_s=0.01).start()
        try:
            s = StreamSession(0, srv.url + "/v1/chat/completions", chat_body("m", "hi", 1000, True), rst=rst)
            task = asyncio.create_task(s.run())
            while s.tokens < 3:
                await asyncio.sleep(0.01)
            assert s.kill() is True and s.killed_phase == "streaming"
            assert s.kill() is False
            await asyncio.wait_for(task, 5)
            for _ in range(100):
                if srv.disconnects:
                    break
                await asyncio.sleep(0.02)
            assert srv.disconnects == 1 and srv.completed == 0
        finally:
            await srv.stop()

    asyncio.run(go())
