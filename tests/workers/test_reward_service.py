"""A reward service over HTTP against a real local server (tests/workers/reward_server.py, 127.0.0.1 only):
batched requests with verl's field names, retries with backoff on 5xx, dropped connections and timeouts but
not on 4xx, a concurrency limit the server sees kept, garbage counted as unscored rows, and a failure
threshold that ends in one message naming the service."""

from __future__ import annotations

import pickle

import pytest
import torch

from rlgraph.runtime.errors import RunError
from rlgraph.runtime.transforms import scored
from rlgraph.tasks.arith import exact_match
from rlgraph.workers.batch import Rollout
from rlgraph.workers.reward_service import (MAX_BACKOFF_S, RewardService, RewardServiceError, backoff_delay,
                                            post_with_retries)

from .reward_server import BAD_REQUEST, DROP, ERROR_503, GARBAGE, OK, WRONG_LENGTH, RewardServer, flaky

ROWS = 12


def rollout(rows: int = ROWS) -> Rollout:
    """Row i answers `i+1=`; every third row is right (`str(i + 1)`), the others say `0`."""
    responses = torch.arange(rows * 3).view(rows, 3) + 5
    answers = [str(i + 1) if i % 3 == 0 else "0" for i in range(rows)]
    return Rollout.build(torch.ones(rows, 2, dtype=torch.long), torch.ones(rows, 2, dtype=torch.long), responses,
                         torch.ones(rows, 3, dtype=torch.long), 0, uid=[i // 4 for i in range(rows)],
                         data_source=["rlgraph/arith"] * rows, ground_truth=[str(i + 1) for i in range(rows)],
                         extra_info=[{"index": i} for i in range(rows)], prompt_text=[f"{i}+1=" for i in range(rows)],
                         response_text=answers)


def expected(batch: Rollout) -> list[float]:
    return [exact_match(*row) for row in zip(batch.data_source, batch.response_text, batch.ground_truth,
                                             batch.extra_info)]


def service(url: str, **settings) -> RewardService:
    values = dict(max_invalid_fraction=0.0, timeout_s=5.0, rows_per_request=4, concurrency=2, retries=3,
                  backoff_s=0.001)
    return RewardService(url, **{**values, **settings})


def row_scores(result) -> list[float]:
    return result.token_level_scores.sum(-1).tolist()


def test_rows_go_in_batched_requests_with_verl_s_field_names_and_come_back_in_order():
    batch = rollout()
    with RewardServer() as server:
        result = service(server.url, rows_per_request=5, concurrency=3).score_rows(batch)
    assert row_scores(result) == expected(batch) and bool(result.valid.all())
    bodies = sorted((r.body for r in server.seen.requests), key=lambda body: body["extra_infos"][0]["index"])
    assert [len(body["solution_strs"]) for body in bodies] == [5, 5, 2]
    assert set(bodies[0]) == {"data_sources", "solution_strs", "ground_truths", "extra_infos", "prompts"}
    assert bodies[2]["prompts"] == ["10+1=", "11+1="] and bodies[2]["ground_truths"] == ["11", "12"]
    assert result.metrics["service/requests"] == 3 and result.metrics["service/retries"] == 0
    assert result.metrics["service/failed_requests"] == 0 and result.metrics["service/latency_max_s"] > 0


def test_5xx_and_dropped_connections_are_retried_until_the_rows_are_scored():
    batch = rollout()
    failing = {0: [ERROR_503, DROP], 4: [DROP], 8: [ERROR_503, ERROR_503, ERROR_503]}  # by first row, per try

    def fate(request):
        fates = failing.get(request.first_index, [])
        return fates[request.tries] if request.tries < len(fates) else OK

    with RewardServer(fate) as server:
        result = service(server.url, retries=3).score_rows(batch)
    assert row_scores(result) == expected(batch) and bool(result.valid.all())
    assert server.fates_of(8) == [ERROR_503] * 3 + [OK]
    assert result.metrics["service/retries"] == 6 and result.metrics["service/requests"] == 3


def test_a_4xx_is_not_retried_and_past_the_threshold_it_is_one_message_naming_the_service():
    with RewardServer(lambda request: BAD_REQUEST) as server:
        with pytest.raises(RunError) as info:
            scored("judge", service(server.url, retries=3), rollout(), "step 2")
    assert len(server.seen.requests) == 3  # one per request, none sent again
    text = str(info.value)
    assert text.startswith(f"reward `judge` failed in step 2: reward service {server.url}: 12 of 12 rows")
    assert "HTTP 400: 'no such field'" in text and "max_invalid_fraction = 0 allows none" in text


def test_garbage_is_an_unscored_row_within_max_invalid_fraction_and_an_error_beyond_it():
    batch = rollout()
    fates = {0: GARBAGE, 4: WRONG_LENGTH}  # not JSON; a list one short

    with RewardServer(lambda request: fates.get(request.first_index, OK)) as server:
        result = service(server.url, max_invalid_fraction=0.7).score_rows(batch)
        assert result.valid.tolist() == [False] * 8 + [True] * 4
        assert row_scores(result)[8:] == expected(batch)[8:] and row_scores(result)[:8] == [0.0] * 8
        assert result.metrics["service/failed_requests"] == 2 and result.metrics["service/retries"] == 0
        with pytest.raises(RewardServiceError, match=r"8 of 12 rows got no usable score \(2 of 3 requests got no "
                                                     r"scores; the first \(rows 0-3\): the answer is not JSON"):
            service(server.url, max_invalid_fraction=0.5).score_rows(batch)


def test_a_score_that_is_no_number_is_an_unscored_row_and_a_verl_dict_gives_its_extras():
    answers = [{"score": 1.0, "acc": 1.0}, {"score": 0.0, "acc": 0.0}, float("nan"), "1.0"]  # json writes NaN
    with RewardServer(scores=lambda body: answers) as server:
        result = service(server.url, max_invalid_fraction=0.5).score_rows(rollout(4))
    assert result.valid.tolist() == [True, True, False, False] and row_scores(result) == [1.0, 0.0, 0.0, 0.0]
    assert result.extras == {"acc": 0.5}


def test_the_server_never_sees_more_requests_at_once_than_concurrency():
    with RewardServer(hold_until_in_flight=3) as server:
        result = service(server.url, rows_per_request=2, concurrency=3).score_rows(rollout())
    assert len(server.seen.requests) == 6 and bool(result.valid.all())
    assert server.seen.max_in_flight == 3


def test_a_request_past_timeout_s_is_retried_and_a_service_that_stays_slow_fails_naming_the_timeout():
    batch = rollout(4)
    with RewardServer(delay_s=lambda request: 0.6 if request.tries == 0 else 0.0) as server:
        result = service(server.url, timeout_s=0.25, rows_per_request=4).score_rows(batch)
    assert row_scores(result) == expected(batch) and result.metrics["service/retries"] >= 1
    with RewardServer(delay_s=lambda request: 0.6) as server:
        with pytest.raises(RewardServiceError, match=r"ReadTimeout.*\(after 1 retries\)"):
            service(server.url, timeout_s=0.25, retries=1).score_rows(batch)


def test_a_flaky_service_scores_every_row_it_answered_and_counts_the_rest():
    """5xx and dropped connections at random (each rows' request fails at most twice), and garbage now and
    then: with 2 retries every request gets an answer, and exactly the garbage ones leave their rows unscored."""
    batch = rollout(24)
    # seed 8: the first request gets a 503 and one of the first six garbage, whatever order they come in
    with RewardServer(flaky(seed=8), delay_s=lambda request: 0.01 * (request.number % 3)) as server:
        result = service(server.url, retries=2, max_invalid_fraction=1.0, concurrency=3).score_rows(batch)
    final = {first: server.fates_of(first)[-1] for first in range(0, 24, 4)}
    assert set(final.values()) <= {OK, GARBAGE}
    valid = [final[4 * (i // 4)] == OK for i in range(24)]
    assert result.valid.tolist() == valid
    assert [s for s, ok in zip(row_scores(result), valid) if ok] == [e for e, ok in zip(expected(batch), valid) if ok]
    retried = sum(fate in (ERROR_503, DROP) for fate in server.seen.fates)
    assert retried > 0 and result.metrics["service/retries"] == retried and not all(valid)


def test_a_service_that_went_away_is_an_error_naming_it_and_the_connection_error():
    batch = rollout(4)
    server = RewardServer().__enter__()
    reward = service(server.url, retries=2)
    assert row_scores(reward.score_rows(batch)) == expected(batch)
    server.stop()
    with pytest.raises(RunError, match=rf"reward service {server.url}: 4 of 4 rows .*ConnectError.*after 2 retries"):
        scored("svc", reward, batch, "step 3")


def test_backoff_doubles_from_backoff_s_is_capped_and_is_what_a_retry_waits():
    for retry in range(1, 12):
        full = min(0.5 * 2 ** (retry - 1), MAX_BACKOFF_S)
        assert full / 2 <= backoff_delay(0.5, retry) <= full
    waits = []
    with RewardServer(lambda request: ERROR_503 if request.tries < 2 else OK) as server:
        import httpx

        with httpx.Client(timeout=5.0, trust_env=False) as client:
            attempt = post_with_retries(client, server.url, b'{"data_sources": [], "solution_strs": [], '
                                        b'"ground_truths": [], "extra_infos": [], "prompts": []}', 3, 0.2, waits.append)
    assert attempt.retries == 2 and attempt.answer == {"scores": []} and attempt.failure is None
    assert 0.1 <= waits[0] <= 0.2 and 0.2 <= waits[1] <= 0.4


def test_a_service_crosses_to_another_process_without_its_connections():
    batch = rollout(4)
    with RewardServer() as server:
        reward = service(server.url)
        reward.score_rows(batch)
        again = pickle.loads(pickle.dumps(reward))
        assert again._client is None and row_scores(again.score_rows(batch)) == expected(batch)
        reward.close()
        again.close()
