"""One Ray instance for the whole runtime test session, and helpers to run the CLI as a user would.

`run_plan` sees `ray.is_initialized()` and uses this connection instead of starting its own, so the
~5 s start-up is paid once. Nothing here calls `ray stop`: the instance is ours and ends with
`ray.shutdown()`.
"""

from __future__ import annotations

import logging

import pytest

from .helpers import REPO


@pytest.fixture(scope="session")
def ray_session():
    from rlgraph.runtime.cluster import local_only

    local_only()  # bind to 127.0.0.1 only, as `rlgraph run` does
    # transformers' log handler holds the sys.stderr of the moment it is first used: make that the session's
    # stderr, not a test's capsys stream, which is closed after that test (a later warning would then print
    # "--- Logging error ---" and a traceback into another test's output)
    from transformers.utils import logging as hf_logging

    hf_logging.get_logger("transformers")
    import ray

    if ray.is_initialized():
        yield ray
        return
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="session")
def arith_model() -> str:
    """builtin:arith-gpt in the user cache (built on first use, about half a minute)."""
    from rlgraph.models import resolve_model_path

    return resolve_model_path("builtin:arith-gpt")


@pytest.fixture
def run_cli(ray_session, arith_model, capsys, monkeypatch, tmp_path):
    """main(["run", ...]) in this process; returns (exit code, stdout + stderr)."""
    from rlgraph.cli import main

    monkeypatch.chdir(REPO)
    monkeypatch.setenv("COLUMNS", "160")

    def run(*args: str) -> tuple[int, str]:
        code = main(["run", *map(str, args)])
        captured = capsys.readouterr()
        return code, captured.out + captured.err

    return run
