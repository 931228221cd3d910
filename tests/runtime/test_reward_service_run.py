"""A GRPO run on the built-in task scored through a local reward service (tests/workers/reward_server.py, on
127.0.0.1) learns as the same run scored by the function does, through 5xx answers and dropped connections;
when the service goes away mid-run, the run stops with one message naming it."""

from __future__ import annotations

import threading

from tests.workers.reward_server import DROP, ERROR_503, OK, RewardServer

from .helpers import SPECS, read_metrics
from .test_errors import assert_clean

FUNCTION = 'reward exact { fn = "rlgraph.tasks.arith:exact_match" }'
STEPS = 2  # steps compared (the second trains on the first's update); the service dies in the third


def spec_text(reward: str) -> str:
    """specs/grpo_arith.rl with `reward` for its function reward and no validation (no requests but the steps')."""
    base = (SPECS / "common" / "arith_base.rl").read_text()
    for old, new in ((FUNCTION, reward), ('  val = "builtin:arith/val"', ""), ("rlgraph 1\n", "")):
        assert old in base, old
        base = base.replace(old, new)
    grpo = (SPECS / "grpo_arith.rl").read_text()
    assert 'include "common/arith_base.rl"' in grpo
    return grpo.replace('include "common/arith_base.rl"', base)


def test_a_run_scored_by_a_flaky_service_learns_as_the_function_does_and_stops_naming_it_when_it_dies(
        run_cli, tmp_path):
    overrides = ["-s", "data.batch_size=16", "-s", "train.checkpoint_every=0", "-s", "train.samples_every=0"]
    (tmp_path / "function.rl").write_text(spec_text(FUNCTION))
    code, out = run_cli(tmp_path / "function.rl", "--output", tmp_path / "function", "-s", f"train.steps={STEPS}",
                        *overrides)
    assert code == 0, out

    def fate(request):
        """Each step's requests fail once (a 503, or a dropped connection) and are answered at the retry; the
        first request of the step after STEPS finds the service gone."""
        batches = len(server.tries)  # requests of distinct rows so far, retries not counted
        if batches > STEPS * 2:
            threading.Thread(target=server.stop).start()
            return DROP
        return (ERROR_503 if batches % 2 else DROP) if request.tries == 0 else OK

    with RewardServer(fate) as server:
        service = f'reward exact {{ url = "{server.url}"  rows_per_request = 64  retries = 2  backoff_s = 0.01 }}'
        (tmp_path / "service.rl").write_text(spec_text(service))
        code, out = run_cli(tmp_path / "service.rl", "--output", tmp_path / "service", "-s",
                            f"train.steps={STEPS + 1}", *overrides)
    assert code == 1, out
    assert f"reward `exact` failed in step {STEPS + 1}: reward service {server.url}: " in out
    assert "(after 2 retries)" in out  # refused or dropped (the order of the service's end and a retry is the OS's)
    assert_clean(out)

    runs = {name: [row for row in read_metrics(tmp_path / name) if "actor/pg_loss" in row]
            for name in ("function", "service")}
    assert len(runs["function"]) == len(runs["service"]) == STEPS
    for function, service in zip(runs["function"], runs["service"]):
        assert service["critic/score/mean"] == function["critic/score/mean"]  # the same scores came back
        assert service["actor/pg_loss"] == function["actor/pg_loss"]  # so the same update was made
        assert service["reward/exact/service/retries"] == 2 and service["reward/exact/service/requests"] == 2
    assert any(row["critic/score/mean"] > 0 for row in runs["service"])  # some answers were right: a signal
