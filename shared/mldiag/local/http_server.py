"""The HTTP server ``mldiag up`` answers on: waitress, with a deadline for each request to arrive.

waitress reads every request, head and body, on its event loop and hands a worker thread only a
request that has arrived whole, so a slow client (a slowloris that sends a header line every few
seconds, or a body a byte at a time) holds a socket, never one of the threads that answer everyone
else. A request still arriving :data:`REQUEST_READ_SECONDS` after its first byte is dropped, idle
connections are closed after :data:`IDLE_SECONDS`, and at most :data:`CONNECTION_LIMIT` connections are
open at once.

An open connection costs a socket whether or not its client means to use it, so idle ones must not keep
everyone else out: a connection that has not begun a request within :data:`FIRST_REQUEST_SECONDS` is
closed, and at the limit the connections idle the longest (none of them reading a request, being
answered or owed an answer, for at least :data:`IDLE_AT_LIMIT_SECONDS`) are closed to make room, so that a
new client waits seconds, not until idle ones time out.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer
from waitress.task import ThreadedTaskDispatcher

THREADS = 16
CONNECTION_LIMIT = 1000
LISTEN_BACKLOG = 1024
REQUEST_READ_SECONDS = 30.0  # a 1 MiB body at 35 KB/s
IDLE_SECONDS = 120
FIRST_REQUEST_SECONDS = 10.0
IDLE_AT_LIMIT_SECONDS = 1.0
ROOM_AT_LIMIT = CONNECTION_LIMIT // 10  # connections closed at once when the limit is reached
# waitress buffers a body before the application sees it; the API refuses anything over 1 MiB itself (413).
MAX_BUFFERED_BODY = 8 * 1024 * 1024


class _DeadlineChannel(HTTPChannel):
    """A connection that remembers when the request it is reading began (0 until its first request)."""

    reading_since = 0.0

    def idle(self) -> bool:
        """Neither reading a request nor answering one, nor with an answer left to send."""
        return self.request is None and not self.requests and not self.total_outbufs_len

    def received(self, data: bytes) -> bool:
        if self.request is None and data:
            self.reading_since = time.monotonic()
        return super().received(data)


class _Server(TcpWSGIServer):
    channel_class = _DeadlineChannel

    def maintenance(self, now: float) -> None:
        """waitress's idle clean-up; the connections whose request has taken too long to arrive, or that began
        none in time; and at the connection limit, the connections idle the longest."""
        super().maintenance(now)
        late = time.monotonic() - REQUEST_READ_SECONDS
        channels = list(self.active_channels.values())
        for channel in channels:
            if channel.request is not None and channel.reading_since < late:
                channel.will_close = True
            elif not channel.reading_since and channel.idle() and channel.last_activity < now - FIRST_REQUEST_SECONDS:
                channel.will_close = True
        if len(self._map) >= self.adj.connection_limit:
            idle = sorted((channel for channel in channels
                           if channel.idle() and channel.last_activity < now - IDLE_AT_LIMIT_SECONDS),
                          key=lambda channel: channel.last_activity)
            for channel in idle[:ROOM_AT_LIMIT]:
                channel.will_close = True


class HttpServer:
    """A WSGI server bound to ``host:port`` now (0: a free port); it serves once :meth:`serve` is called.

    Binding raises the system's :class:`OSError` (or :class:`socket.gaierror` for an unknown host), and
    nothing is left running then.
    """

    def __init__(self, host: str, port: int):
        family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        self.socket = socket.socket(family, kind, proto)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(LISTEN_BACKLOG)  # clients that come before serve() wait rather than be refused
        except OSError:
            self.socket.close()
            raise
        self.bind_addr: tuple[str, int] = self.socket.getsockname()[:2]
        self._server: _Server | None = None

    def serve(self, app: Any) -> None:
        """Answer with ``app`` until a ``KeyboardInterrupt`` (Ctrl-C, or SIGTERM turned into one)."""
        adjustments = Adjustments(
            sockets=[self.socket], threads=THREADS, connection_limit=CONNECTION_LIMIT, backlog=LISTEN_BACKLOG,
            channel_timeout=IDLE_SECONDS, cleanup_interval=1, asyncore_use_poll=True,
            max_request_body_size=MAX_BUFFERED_BODY, ident="mldiag", expose_tracebacks=False)
        dispatcher = ThreadedTaskDispatcher()
        dispatcher.set_thread_count(THREADS)
        self._server = _Server(app, {}, True, self.socket, dispatcher=dispatcher, adj=adjustments, bind_socket=False,
                               sockinfo=(self.socket.family, self.socket.type, self.socket.proto, self.bind_addr))
        self._server.run()

    def stop(self) -> None:
        """Close the listening socket and every connection, and stop the worker threads."""
        if self._server is None:
            self.socket.close()
            return
        for channel in list(self._server.active_channels.values()):
            channel.close()
        self._server.task_dispatcher.shutdown(timeout=5)
        self._server.close()
