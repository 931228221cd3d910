import json
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def arith_gpt_dir(tmp_path_factory) -> Path:
    """builtin:arith-gpt, built once per test session into a fresh cache (the cold-start path users take).

    Set RLGRAPH_TEST_CACHE to a folder to reuse a model built there before.
    """
    from rlgraph.models import resolve_model_path

    cache = os.environ.get("RLGRAPH_TEST_CACHE") or str(tmp_path_factory.mktemp("rlgraph-cache"))
    saved = os.environ.get("RLGRAPH_CACHE")
    os.environ["RLGRAPH_CACHE"] = cache
    try:
        yield Path(resolve_model_path("builtin:arith-gpt"))
    finally:
        if saved is None:
            os.environ.pop("RLGRAPH_CACHE", None)
        else:
            os.environ["RLGRAPH_CACHE"] = saved


@pytest.fixture(scope="session")
def arith_gpt(arith_gpt_dir):
    """(model, tokenizer, build report) loaded from the folder the plain Hugging Face way."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(arith_gpt_dir)
    tokenizer = AutoTokenizer.from_pretrained(arith_gpt_dir)
    report = json.loads((arith_gpt_dir / "rlgraph_build.json").read_text())
    return model.eval(), tokenizer, report
