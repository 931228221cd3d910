"""A tiny random Llama with a character tokenizer, saved once per session as an HF folder."""

from __future__ import annotations

import pytest
import torch

PAD, EOS = 0, 1
ALPHABET = "0123456789+="


def build_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(["<pad>", "</s>", "<unk>", *ALPHABET])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", padding_side="left"
    )


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


def make_items(prompts: list[str], tokenizer, answers: list[str] | None = None) -> list[dict]:
    """Dataset items in rlgraph.data's shape."""
    answers = answers or ["" for _ in prompts]
    return [
        {
            "input_ids": tokenizer(p)["input_ids"],
            "prompt_text": p,
            "data_source": "test/arith",
            "ground_truth": a,
            "extra_info": {"index": i},
            "index": i,
        }
        for i, (p, a) in enumerate(zip(prompts, answers))
    ]
