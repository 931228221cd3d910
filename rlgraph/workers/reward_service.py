"""A reward service: rows scored by a server over HTTP (`reward NAME { url = "http://host:port/score" }`).

A batch's rows go out in requests of `rows_per_request` rows, `concurrency` of them at a time. A request is
a JSON object of lists, one entry per row, named as verl names a batched reward function's arguments
(`data_sources`, `solution_strs`, `ground_truths`, `extra_infos`), plus the `prompts` (as OpenRLHF's
remote reward sends them). The answer is `{"scores": [...]}` (or OpenRLHF's `{"rewards": [...]}`), one
entry per row, in order: a number, or verl's dict with the number under `score` whose other numeric keys
become metrics, as a reward function's do.

A request that cannot connect, is dropped, times out (`timeout_s`) or gets a 5xx is sent again after
`backoff_s`, doubled at each retry, up to `retries` times: the service may be restarting or overloaded. A
4xx is not: the request itself is wrong, and sending it again would get the same answer. The rows of a
request that finally failed, and rows whose answer is no usable score (not JSON, a list of the wrong
length, NaN, text), get no score; `max_invalid_fraction` says what share of a batch may be so (those rows
are left out of the update, as a reward function's are), and more is a RewardServiceError that names the
service and the first failure. Each batch's requests, retries, failures and latency are metrics.
"""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import torch

from rlgraph.workers.batch import Rollout
from rlgraph.workers.reward import RewardScores, scores_of
from rlgraph.workers.reward_process import RewardFunctionError, shown, take_score

MAX_BACKOFF_S = 30.0  # a retry never waits longer than this, however many came before it
_SHOWN_BODY = 200  # characters of a failed answer's body in a message


class RewardServiceError(RewardFunctionError):
    """More of a batch's rows than `max_invalid_fraction` allows got no usable score from the service."""


@dataclass(frozen=True)
class Attempt:
    """What came of one request and its retries."""

    answer: Any  # the parsed JSON of a 2xx answer; None when there was none
    failure: str | None  # why there is no answer (the last try's reason), None when there is one
    retries: int
    latency_s: float  # from the first try's start to the last one's end, waits between them included


def backoff_delay(backoff_s: float, retry: int) -> float:
    """Seconds before retry number `retry` (1, 2, ...): backoff_s, doubled each time, capped, and drawn between
    half of it and all of it, so the requests that failed together do not all come back at the same moment."""
    delay = min(backoff_s * 2 ** (retry - 1), MAX_BACKOFF_S)
    return delay * random.uniform(0.5, 1.0)


def post_with_retries(client: Any, url: str, body: bytes, retries: int, backoff_s: float,
                      sleep: Callable[[float], None] = time.sleep) -> Attempt:
    """POST `body` to `url`; retried on connection errors, timeouts and 5xx, not on 4xx."""
    import httpx

    started = time.monotonic()
    failure = ""
    for retry in range(retries + 1):
        if retry:
            sleep(backoff_delay(backoff_s, retry))
        try:
            response = client.post(url, content=body, headers={"content-type": "application/json"})
        except httpx.TransportError as err:  # refused, dropped, timed out: the service may be back in a moment
            failure = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
            continue
        if response.status_code >= 500:
            failure = f"HTTP {response.status_code}: {_body(response)}"
            continue
        took = time.monotonic() - started
        if not 200 <= response.status_code < 300:  # 4xx (or a redirect): sending it again gets the same answer
            return Attempt(None, f"HTTP {response.status_code}: {_body(response)}", retry, took)
        try:
            return Attempt(response.json(), None, retry, took)
        except ValueError:
            return Attempt(None, f"the answer is not JSON: {_body(response)}", retry, took)
    return Attempt(None, f"{failure} (after {retries} retries)" if retries else failure, retries,
                   time.monotonic() - started)


def answer_scores(answer: Any, rows: int) -> tuple[list[Any] | None, str | None]:
    """The answer's list of per-row entries, or why it has none."""
    scores = answer.get("scores", answer.get("rewards")) if isinstance(answer, dict) else None
    if not isinstance(scores, list) or len(scores) != rows:
        return None, (f"the answer holds no list of {rows} scores under 'scores' (or 'rewards'): "
                      f"{shown(answer)}")
    return scores, None


class RewardService:
    """Scores a rollout's rows by the service at `url`; `score_rows` has RuleReward's contract."""

    def __init__(self, url: str, *, max_invalid_fraction: float, timeout_s: float, rows_per_request: int,
                 concurrency: int, retries: int, backoff_s: float) -> None:
        self.url, self.name = url, f"reward service {url}"
        self.max_invalid_fraction, self.timeout_s = max_invalid_fraction, timeout_s
        self.rows_per_request, self.concurrency = rows_per_request, concurrency
        self.retries, self.backoff_s = retries, backoff_s
        self._client: Any = None  # an httpx.Client, made on first use: it does not cross to another process

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def score(self, rollout: Rollout) -> torch.Tensor:
        """(batch, R) float32 with each row's score at its `reward_index`, as RuleReward.score."""
        return self.score_rows(rollout).token_level_scores

    def score_rows(self, rollout: Rollout) -> RewardScores:
        """The scores and which rows have one; RewardServiceError when more rows than `max_invalid_fraction`
        allows have none."""
        chunks = [range(start, min(start + self.rows_per_request, len(rollout)))
                  for start in range(0, len(rollout), self.rows_per_request)]
        client = self._http()
        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(chunks)))) as pool:
            attempts = list(pool.map(lambda rows: post_with_retries(client, self.url, request_body(rollout, rows),
                                                                    self.retries, self.backoff_s), chunks))
        values: list[Any] = []
        extras: dict[str, list[float]] = {}
        failures: list[tuple[range, str]] = []  # (the request's rows, why it gave no scores)
        for rows, attempt in zip(chunks, attempts):
            scores, why = (None, attempt.failure) if attempt.failure else answer_scores(attempt.answer, len(rows))
            if scores is None:
                failures.append((rows, why))
                values += [why] * len(rows)
            else:
                for value in scores:
                    take_score(value, values, extras)
        result = scores_of(rollout, values, extras)
        latencies = [a.latency_s for a in attempts]
        result.metrics = {"service/requests": len(attempts), "service/retries": sum(a.retries for a in attempts),
                          "service/failed_requests": len(failures),
                          "service/latency_mean_s": sum(latencies) / len(latencies) if latencies else 0.0,
                          "service/latency_max_s": max(latencies, default=0.0)}
        self._check_invalid(values, failures, len(attempts))
        return result

    def _check_invalid(self, values: list[Any], failures: list[tuple[range, str]], requests: int) -> None:
        invalid = [row for row, value in enumerate(values) if isinstance(value, str)]
        if len(invalid) <= self.max_invalid_fraction * len(values):
            return
        if failures:
            rows, why = failures[0]
            first = (f"{len(failures)} of {requests} requests got no scores; the first (rows {rows.start}-"
                     f"{rows.stop - 1}): {why}")
        else:
            first = f"row {invalid[0]} got {values[invalid[0]]}, which is not a usable score"
        allowed = (f"max_invalid_fraction = {self.max_invalid_fraction:g} allows "
                   f"{int(self.max_invalid_fraction * len(values))}" if self.max_invalid_fraction
                   else "max_invalid_fraction = 0 allows none")
        raise RewardServiceError(
            f"{self.name}: {len(invalid)} of {len(values)} rows got no usable score ({first}). {allowed}: check "
            f"that the service runs and answers {{\"scores\": [...]}} with one number per row, raise `retries` or "
            "`timeout_s` if it is only slow, or raise `max_invalid_fraction` in the reward's block to leave up to "
            "that share of a batch's rows out of the update.")

    def _http(self) -> Any:
        import httpx

        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout_s, trust_env=False,  # no proxy from the environment
                                        limits=httpx.Limits(max_connections=self.concurrency))
        return self._client


def request_body(rollout: Rollout, rows: range) -> bytes:
    """One request's JSON: a list per field, one entry per row."""
    body = {"data_sources": [rollout.data_source[i] for i in rows],
            "solution_strs": [rollout.response_text[i] for i in rows],
            "ground_truths": [rollout.ground_truth[i] for i in rows],
            "extra_infos": [rollout.extra_info[i] for i in rows],
            "prompts": [rollout.prompt_text[i] for i in rows]}
    return json.dumps(body, default=_plain).encode()


def _plain(value: Any) -> Any:
    """A value json cannot write as it is: numpy and torch values as lists or numbers, anything else as text."""
    return value.tolist() if hasattr(value, "tolist") else str(value)


def _body(response: Any) -> str:
    text = response.text
    return repr(text if len(text) <= _SHOWN_BODY else text[:_SHOWN_BODY] + "...")
