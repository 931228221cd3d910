"""`rlgraph run` in a subprocess, as a user types it: its own local Ray, or a cluster's address."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from .helpers import REPO, fast, read_metrics


def rlgraph(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if k != "RAY_ADDRESS"}
    return subprocess.run([sys.executable, "-m", "rlgraph.cli", "run", *map(str, args)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_run_starts_and_stops_a_private_local_ray(arith_model, tmp_path):
    done = rlgraph("specs/grpo_arith.rl", "--output", tmp_path, *fast(steps=1))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "ray: local (127.0.0.1:" in out  # started here, bound to the loopback interface
    assert "Traceback" not in out
    assert [r["training/global_step"] for r in read_metrics(tmp_path)] == [0, 1]


def test_run_on_a_cluster_address_leaves_the_cluster_as_it_found_it(ray_session, arith_model, tmp_path):
    ray = ray_session
    address = ray.get_runtime_context().gcs_address
    before = ray.available_resources().get("CPU")
    done = rlgraph("specs/grpo_arith.rl", "--output", tmp_path, "--address", address, *fast(steps=1))
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert f"ray: remote ({address})" in out
    assert ray.is_initialized() and ray.cluster_resources().get("CPU") == 4  # still up
    deadline = time.time() + 30  # our actors and placement groups are gone: every CPU is free again
    while ray.available_resources().get("CPU") != before and time.time() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU") == before
