"""The one step runner (rlgraph/runtime/step.py) calls a role in process or through Ray: the two train alike.

A spec whose roles all live in one process runs each step there, its role calls made in process
(`driver.RemoteStep`); the same spec with that path turned off runs the same stage loop from the driver, each
role call through Ray. Same seed, same calls, same arguments: every metric that is not a time is the same.
"""

from __future__ import annotations

import math

from .helpers import SPECS, fast, read_metrics

TIMES = ("timing_s/", "startup_s/", "perf/time_per_step", "perf/throughput")


def _metrics(run) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(TIMES)} for r in read_metrics(run)]


def test_a_step_in_process_and_the_same_step_through_ray_give_the_same_metrics(run_cli, tmp_path, monkeypatch):
    import rlgraph.runtime.loop as loop

    spec = SPECS / "ppo_arith.rl"  # actor, ref, critic, rollout in one process; a reward, gae, a KL penalty
    code, text = run_cli(spec, "--output", tmp_path / "in_process", *fast(steps=2))
    assert code == 0, text
    assert "each step runs there in one call" in text
    with monkeypatch.context() as patched:
        patched.setattr(loop, "remote_step", lambda *args: None)  # the per-stage path, every call through Ray
        code, text = run_cli(spec, "--output", tmp_path / "through_ray", *fast(steps=2))
    assert code == 0, text
    assert "each step runs there in one call" not in text
    in_process, through_ray = _metrics(tmp_path / "in_process"), _metrics(tmp_path / "through_ray")
    assert [r["training/global_step"] for r in in_process] == [0, 1, 2]
    assert in_process[1]["actor/grad_norm"] > 0 and "critic/values/mean" in in_process[1]  # it trained, with values
    for a, b in zip(in_process, through_ray, strict=True):
        assert a.keys() == b.keys()
        different = {k: (a[k], b[k]) for k in a
                     if a[k] != b[k] and not (isinstance(a[k], float) and math.isnan(a[k]) and math.isnan(b[k]))}
        assert not different, different
