import json
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def arith_gpt_dir() -> Path:
    """builtin:arith-gpt as users get it: the shipped folder, its hashes checked."""
    from rlgraph.models import resolve_model_path

    return Path(resolve_model_path("builtin:arith-gpt"))


@pytest.fixture(scope="session")
def arith_gpt(arith_gpt_dir):
    """(model, tokenizer, build report) loaded from the folder the plain Hugging Face way."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(arith_gpt_dir)
    tokenizer = AutoTokenizer.from_pretrained(arith_gpt_dir)
    report = json.loads((arith_gpt_dir / "rlgraph_build.json").read_text())
    return model.eval(), tokenizer, report
