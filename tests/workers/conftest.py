"""Session fixtures: a tiny random Llama saved as an HF folder, and its tokenizer."""

from __future__ import annotations

import pytest
import torch

from .helpers import EOS, PAD, build_tokenizer


def pytest_configure(config):
    config.addinivalue_line("markers", "learning: end-to-end learning checks of the workers (run alone: -m learning)")

@pytest.fixture(autouse=True)
def one_thread():
    """The models here are tiny: one thread is as fast, and much faster on a busy machine (no OpenMP spinning)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tokenizer():
    return build_tokenizer()
