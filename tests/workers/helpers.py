"""A tiny random Llama with a character tokenizer, and dataset items in rlgraph.data's shape."""

from __future__ import annotations

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
