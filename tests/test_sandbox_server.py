"""The sandbox's HTTP server on the wire: one write per answer, 100-continue, keep-alive."""

from __future__ import annotations

import json
import socket
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from payrun.sandbox import RunningSandbox, serve_in_thread

# struct tcp_info (linux/tcp.h): tcpi_data_segs_in, the segments received carrying data
_TCP_INFO_SIZE = 160
_DATA_SEGS_IN = 152


def _data_segments_in(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_SIZE)
    if len(info) < _DATA_SEGS_IN + 4:
        pytest.skip("this kernel's tcp_info has no tcpi_data_segs_in")
    return int(struct.unpack_from("I", info, _DATA_SEGS_IN)[0])


@contextmanager
def _connection(server: RunningSandbox) -> Iterator[socket.socket]:
    host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        yield sock


def _request(
    method: str, path: str, key: str, body: bytes = b"", *, expect_continue: bool = False
) -> bytes:
    """One request; with ``expect_continue`` its head alone (the body is sent after 100)."""
    head = f"{method} {path} HTTP/1.1\r\nHost: sandbox\r\nAuthorization: ServiceAPIKey {key}\r\n"
    if body or method == "POST":
        head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    if expect_continue:
        return (head + "Expect: 100-continue\r\n\r\n").encode()
    return (head + "\r\n").encode() + body


def _read_answer(sock: socket.socket, pending: bytearray) -> tuple[int, bytes]:
    """Read one Content-Length framed answer; return its status and body."""
    while b"\r\n\r\n" not in pending:
        pending += sock.recv(65536)
    head, _, rest = bytes(pending).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(
        int(line.split(b":", 1)[1]) for line in lines if line.lower().startswith(b"content-length:")
    )
    pending[:] = rest
    while len(pending) < length:
        pending += sock.recv(65536)
    body = bytes(pending[:length])
    del pending[:length]
    return int(lines[0].split()[1]), body


@pytest.mark.skipif(sys.platform != "linux", reason="counts TCP segments with Linux's TCP_INFO")
def test_each_answer_reaches_the_client_in_one_segment() -> None:
    """Each answer's status line, headers and body arrive in one TCP segment, not two."""
    with serve_in_thread() as server, _connection(server) as sock:
        key = server.api_key
        pending = bytearray()
        sock.sendall(_request("GET", "/v0/index", key))
        assert _read_answer(sock, pending)[0] == 200
        before = _data_segments_in(sock)
        asked = [
            _request("GET", "/v0/index", key),
            _request("GET", "/v0/ping", key),
            _request("GET", "/v0/nowhere", key),
            _request("POST", "/v0/index", key, b"{}"),
            _request("GET", "/v0/index", "wrong-key"),
        ] * 4
        statuses = []
        for request in asked:
            sock.sendall(request)
            statuses.append(_read_answer(sock, pending)[0])
        assert statuses == [200, 204, 404, 405, 401] * 4
        assert _data_segments_in(sock) - before == len(asked)


def test_expect_100_continue_is_answered_before_the_body() -> None:
    """A client waiting for ``100 Continue`` gets it before it sends its body, then the answer."""
    with serve_in_thread(latency_ms=20) as server, _connection(server) as sock:
        key = server.api_key
        organization = json.loads(_fetch(sock, _request("GET", "/v0/index", key)))
        body = b'{"search-query": "3000"}'
        path = f"{organization['organization-url']}/bank/accounts/search"
        sock.sendall(_request("POST", path, key, body, expect_continue=True))
        interim = sock.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n")
        sock.sendall(body)
        pending = bytearray(interim.partition(b"\r\n\r\n")[2])
        status, answer = _read_answer(sock, pending)
        assert status == 200
        assert json.loads(answer)["search-results"]


def _fetch(sock: socket.socket, request: bytes) -> bytes:
    sock.sendall(request)
    status, body = _read_answer(sock, bytearray())
    assert status == 200
    return body


def test_an_answer_closing_the_connection_arrives_whole() -> None:
    """Asked with ``Connection: close``, the whole answer arrives before the connection ends."""
    with serve_in_thread() as server, _connection(server) as sock:
        request = _request("GET", "/v0/index", server.api_key)
        sock.sendall(request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        received = bytearray()
        while chunk := sock.recv(65536):
            received += chunk
        status, body = _read_answer(sock, received)
        assert status == 200
        assert "organization-url" in json.loads(body)
        assert not received
