"""The HTTP/1.1 connection the explorer's server speaks: uvicorn's h11 protocol, with three
refusals added before any request reaches the app.

    431   request headers over ``MAX_HEAD_BYTES``. h11 counts only a head still arriving
          (``h11_max_incomplete_event_size``, set to the same limit); a large head that arrives
          in one piece is measured here once parsed. uvicorn would answer either with 400.
    400   a request with both Content-Length and Transfer-Encoding (RFC 9112 §6.1): the two
          framings disagree on where the body ends, which is how a second, smuggled request
          hides in a first. The connection closes after the answer, so the bytes that follow
          are never read as a request.
    close a head not complete within ``HEAD_TIMEOUT_S`` of the connection (or of the last
          answer): a client trickling header bytes (slowloris) cannot hold a connection open.

``attnlab serve`` runs uvicorn with ``GuardedH11Protocol`` (``server_config``); tests do too.
"""

from __future__ import annotations

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["HEAD_TIMEOUT_S", "MAX_HEAD_BYTES", "GuardedH11Protocol", "server_config"]

MAX_HEAD_BYTES = 16 * 1024  # the explorer's own requests send well under 2 KiB of headers
HEAD_TIMEOUT_S = 10.0
_PHRASES = {400: b"Bad Request", 431: b"Request Header Fields Too Large"}


class GuardedH11Protocol(H11Protocol):
    """uvicorn's H11Protocol with a header size limit, no CL + TE requests, a head timeout."""

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._status = 400
        self._head_timer = None
        parse = self.conn.next_event

        def next_event():
            try:
                event = parse()
            except h11.RemoteProtocolError as exc:  # "Receive buffer too long" hints 431
                self._status = exc.error_status_hint
                raise
            if isinstance(event, h11.Request):
                self._cancel_head_timer()
                self._check_head(event)
            return event

        self.conn.next_event = next_event
        self._arm_head_timer()

    def _check_head(self, request: h11.Request) -> None:
        size = len(request.target) + sum(len(k) + len(v) + 4 for k, v in request.headers)
        if size > MAX_HEAD_BYTES:
            self._status = 431
            raise h11.RemoteProtocolError(f"headers of {size} bytes", error_status_hint=431)
        names = {k.lower() for k, _ in request.headers}
        if b"content-length" in names and b"transfer-encoding" in names:
            self._status = 400
            raise h11.RemoteProtocolError("Content-Length with Transfer-Encoding")

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request h11 refused, with the status the refusal calls for."""
        status = self._status if self._status in _PHRASES else 400
        if status == 431:
            msg = f"Request headers over {MAX_HEAD_BYTES} bytes."
        headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")]
        try:
            event = h11.Response(status_code=status, headers=headers, reason=_PHRASES[status])
            self.transport.write(self.conn.send(event))
            self.transport.write(self.conn.send(h11.Data(data=msg.encode("ascii"))))
            self.transport.write(self.conn.send(h11.EndOfMessage()))
        except h11.LocalProtocolError:  # h11 cannot answer in this state: close
            pass
        self.transport.close()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm_head_timer()  # the next request's head has the same deadline

    def connection_lost(self, exc) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(HEAD_TIMEOUT_S, self._head_timeout)

    def _cancel_head_timer(self) -> None:
        if getattr(self, "_head_timer", None) is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()  # no complete head in time: a trickle, or an idle socket


def server_config(app, host: str, port: int, **options):
    """The uvicorn Config the explorer runs with: the guarded protocol and its limits."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=GuardedH11Protocol,
        h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        **options,
    )
