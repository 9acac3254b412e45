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


def test_a_silent_server_gives_no_answer_within_n_s() -> None:
    """Issue 11 item 6: a timeout says so, with the deadline (it used to be an empty reason)."""
    import asyncio

    from pdfleet.verify import checks, client
    from pdfleet.verify.settings import Settings
    from pdfleet.verify.targets import Target, Worker

    async def go() -> None:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await asyncio.sleep(30)

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            try:
                await client.request(url + "/server_info", timeout_s=0.3)
            except TimeoutError as e:  # still a TimeoutError for callers that catch that
                assert isinstance(e, client.HTTPClientError)
                assert str(e) == f"GET {url}/server_info: no answer within 0.3 s"
            else:
                raise AssertionError("no timeout")
            target = Target(router_url=url, workers=[Worker("prefill", "prefill", url)])
            try:
                await checks.config_gate(target, Settings(http_timeout_s=0.3))
            except checks.Unreachable as e:
                assert "no answer within 0.3 s" in str(e)
            else:
                raise AssertionError("a silent router is unreachable")
        finally:
            server.close()

    asyncio.run(go())
