"""A real reward service for the tests: a stdlib HTTP server on 127.0.0.1 (port 0) in a thread of the test's
process, scoring rows with the built-in task's exact_match. What it does to each request (answer, 5xx, drop
the connection, answer garbage, answer late) is chosen by `fate(request)`, so a test can make it slow, flaky
or broken on purpose and knows afterwards what it did."""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from rlgraph.tasks.arith import exact_match

OK, ERROR_503, DROP, GARBAGE, WRONG_LENGTH, BAD_REQUEST = "ok", "503", "drop", "garbage", "wrong-length", "400"


@dataclass
class Request:
    number: int  # 0, 1, ... in the order the server read them
    body: dict[str, Any]
    first_index: int  # extra_info["index"] of its first row: which rows it carries, whatever the order
    tries: int  # of these rows before this one (1 = the first retry)


@dataclass
class Seen:
    requests: list[Request] = field(default_factory=list)
    fates: list[str] = field(default_factory=list)  # what the server did to each request, by number
    in_flight: int = 0
    max_in_flight: int = 0


class RewardServer:
    """`with RewardServer(fate) as server:` serves at `server.url` until the block ends (or `stop()`)."""

    def __init__(self, fate: Callable[[Request], str] = lambda request: OK, delay_s: Callable[[Request], float] =
                 lambda request: 0.0, hold_until_in_flight: int = 0,
                 scores: Callable[[dict], list[Any]] | None = None) -> None:
        """`scores(body)`: what an OK answer holds under "scores" (exact_match of each row by default)."""
        self.fate, self.delay_s, self.hold_until_in_flight = fate, delay_s, hold_until_in_flight
        self.scores = scores or exact_matches
        self.seen = Seen()
        self.lock = threading.Condition()
        self.tries: dict[int, int] = {}
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/score"
        # a short poll: `stop` waits for the serving loop to see it, which by default takes up to 0.5 s
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> "RewardServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        """The service goes away: the listening socket is closed, so a later request is refused."""
        if self.thread.is_alive():
            self.httpd.shutdown()
        self.httpd.server_close()

    def fates_of(self, first_index: int) -> list[str]:
        return [self.seen.fates[r.number] for r in self.seen.requests if r.first_index == first_index]

    # --- the handler

    def _handler(self) -> type:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                request = server._arrived(body)
                try:
                    server._hold()
                    time.sleep(server.delay_s(request))
                    self._answer(server.seen.fates[request.number], body)
                finally:
                    with server.lock:
                        server.seen.in_flight -= 1

            def _answer(self, fate: str, body: dict) -> None:
                if fate == DROP:  # no status line at all: the client sees the connection end
                    self.close_connection = True
                    return
                if fate in (ERROR_503, BAD_REQUEST):
                    self._send(int(fate), b"overloaded" if fate == ERROR_503 else b"no such field")
                    return
                if fate == GARBAGE:
                    self._send(200, b"<html>not json")
                    return
                scores = server.scores(body)
                if fate == WRONG_LENGTH:
                    scores = scores[:-1]
                self._send(200, json.dumps({"scores": scores}).encode())

            def _send(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler

    def _arrived(self, body: dict) -> Request:
        first = body["extra_infos"][0]["index"] if body["extra_infos"] else -1
        with self.lock:
            tries = self.tries.get(first, 0)
            self.tries[first] = tries + 1
            request = Request(len(self.seen.requests), body, first, tries)
            self.seen.requests.append(request)
            self.seen.fates.append(self.fate(request))
            self.seen.in_flight += 1
            self.seen.max_in_flight = max(self.seen.max_in_flight, self.seen.in_flight)
            self.lock.notify_all()
        return request

    def _hold(self) -> None:
        """Keep a request open until `hold_until_in_flight` are (or 5 s passed): a client that keeps to a lower
        limit is then seen at exactly that limit, and one that does not, above it."""
        if self.hold_until_in_flight:
            with self.lock:
                self.lock.wait_for(lambda: self.seen.max_in_flight >= self.hold_until_in_flight, timeout=5.0)
            time.sleep(0.05)  # room for a request beyond the limit to arrive


def exact_matches(body: dict) -> list[float]:
    """The built-in task's score of each row of a request."""
    return [exact_match(*row) for row in zip(body["data_sources"], body["solution_strs"], body["ground_truths"],
                                             body["extra_infos"])]


def flaky(seed: int, max_failures: int = 2) -> Callable[[Request], str]:
    """A service that answers 503 or drops the connection now and then, and sometimes answers garbage; the
    same rows fail at most `max_failures` times in a row, so `retries >= max_failures` gets them through."""
    rng = random.Random(seed)
    lock = threading.Lock()

    def fate(request: Request) -> str:
        with lock:
            draw = rng.random()
        if request.tries < max_failures and draw < 0.5:
            return ERROR_503 if draw < 0.25 else DROP
        return GARBAGE if draw > 0.9 else OK

    return fate
