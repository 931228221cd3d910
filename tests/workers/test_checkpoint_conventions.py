"""Real checkpoints' conventions: several end-of-turn ids, no pad token, sentencepiece and tiktoken tokenizers.

Each test saves its own tiny model folder with save_pretrained (no downloads exist on this machine).
"""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import pytest
import torch

from .helpers import EOS, PAD, build_tokenizer, generate_settings, log_prob_settings, make_items
from rlgraph.workers.engines.base import shipped_eos_ids, stop_token_ids
from rlgraph.workers.engines.hf import HFEngine
from rlgraph.workers.loading import load_tokenizer
from rlgraph.workers.rollout import generate_rollout

PROMPTS = ["12+34=", "5+6=", "7=", "99+1="]


def save_llama(folder: Path, tokenizer, vocab_size: int, eos: int, pad: int | None) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         pad_token_id=pad, eos_token_id=eos, bos_token_id=None, tie_word_embeddings=True)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)
    return folder


def engine_of(folder: Path) -> HFEngine:
    return HFEngine.from_pretrained(str(folder), dtype="float32", device="cpu")


# ---- every end-of-turn id of the generation config ends a response ---------------------------------


def test_a_response_ends_at_the_first_of_the_generation_configs_eos_ids(tmp_path, tokenizer):
    from transformers import GenerationConfig

    folder = save_llama(tmp_path / "chat", tokenizer, len(tokenizer), EOS, PAD)
    items = make_items(PROMPTS, tokenizer)
    greedy = generate_settings(n=1, max_new_tokens=8, temperature=0.0)
    before = generate_rollout(engine_of(folder), items, greedy)
    rows = [row[: int(length)] for row, length in zip(before.responses.tolist(), before.loss_mask.sum(1))]
    # a token the model says mid-response becomes a second end-of-turn id, as a chat model's <|eot_id|>
    turn_end = next(t for row in rows for t in row[:-1] if t != EOS)
    GenerationConfig(eos_token_id=[EOS, turn_end], pad_token_id=PAD).save_pretrained(folder)

    engine = engine_of(folder)
    assert engine.eos_token_ids == [EOS, turn_end]
    # the folder's file, read without the model, gives the same ids (the sglang engine reads it so)
    assert shipped_eos_ids(str(folder)) == [EOS, turn_end]
    assert stop_token_ids(engine.tokenizer.eos_token_id, shipped_eos_ids(str(folder))) == engine.eos_token_ids
    after = generate_rollout(engine, items, greedy)
    ends = [next(i for i, t in enumerate(row + [EOS]) if t in (EOS, turn_end)) for row in rows]
    expected = [min(end + 1, len(row)) for end, row in zip(ends, rows)]
    assert after.loss_mask.sum(1).tolist() == expected
    assert any(e < len(row) for e, row in zip(expected, rows))  # the new id did cut a response short
    assert after.reward_index.tolist() == [e - 1 for e in expected]
    for row, length, original in zip(after.responses.tolist(), expected, rows):
        assert row[:length] == original[:length]  # the same tokens, up to and including the stop
        assert row[length:] == [PAD] * (len(row) - length)


def test_a_generation_config_with_one_eos_id_as_an_int(tmp_path, tokenizer):
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 7}))
    assert shipped_eos_ids(str(tmp_path)) == [7]
    assert stop_token_ids(EOS, [7, EOS]) == [EOS, 7]
    assert shipped_eos_ids(str(tmp_path / "nowhere")) == []


# ---- a tokenizer without a pad token pads with EOS, and nothing reads the padding ---------------------


def test_a_tokenizer_without_a_pad_token_pads_with_eos_and_the_masks_come_from_lengths(tmp_path):
    from rlgraph.workers.policy import PolicyWorker

    from .helpers import actor_settings

    tokenizer = build_tokenizer()
    tokenizer.pad_token = None
    folder = save_llama(tmp_path / "no-pad", tokenizer, len(tokenizer), EOS, pad=None)
    assert load_tokenizer(str(folder)).pad_token_id is None

    actor = PolicyWorker(str(folder), actor_settings(), seed=0)
    assert actor.engine.pad_token_id == EOS
    items = make_items(PROMPTS, tokenizer)
    rollout = actor.generate(items, settings=generate_settings(n=2, max_new_tokens=6, keep_log_probs=True), seed=3)
    prompt_lengths = [len(item["input_ids"]) for item in items for _ in range(2)]
    width = max(prompt_lengths)
    # prompts: left-padded with EOS, and the mask counts the prompt's tokens, not the tokens that are not EOS
    assert rollout.attention_mask[:, :width].sum(1).tolist() == prompt_lengths
    assert all(row[: width - n] == [EOS] * (width - n) for row, n in zip(rollout.prompts.tolist(), prompt_lengths))
    # responses: up to and including the first EOS, then EOS padding outside the loss mask
    for row, mask in zip(rollout.responses.tolist(), rollout.loss_mask.tolist()):
        length = sum(mask)
        assert mask == [1] * length + [0] * (len(row) - length)
        assert EOS not in row[: length - 1] and row[length:] == [EOS] * (len(row) - length)
    assert any(sum(mask) < 6 for mask in rollout.loss_mask.tolist())  # some responses did end early
    # the trainer's recomputed log-probs agree with sampling's: the padding was never read as a token
    recomputed = actor.log_prob(rollout, settings=log_prob_settings())
    mask = rollout.loss_mask.bool()
    torch.testing.assert_close(rollout.sample_log_probs[mask], recomputed[mask], rtol=0, atol=1e-4)


# ---- sentencepiece and tiktoken tokenizers (the run extra installs both) --------------------------------


def train_sentencepiece() -> bytes:
    import sentencepiece

    lines = [f"{a}+{b}={a + b}" for a in range(40) for b in range(0, 40, 3)]
    model = io.BytesIO()
    # no pad id, as Llama 2's tokenizer.model
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=40,
                                             model_type="bpe", unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                             minloglevel=2)
    return model.getvalue()


def test_a_sentencepiece_tokenizer_model_folder_loads_and_generates(tmp_path):
    folder = tmp_path / "sp"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(train_sentencepiece())
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
    tokenizer = load_tokenizer(str(folder))
    ids = tokenizer("12+34=")["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "12+34="
    assert tokenizer.eos_token_id == 2 and tokenizer.pad_token_id is None

    save_llama(folder, None, len(tokenizer), eos=2, pad=None)
    engine = engine_of(folder)
    assert engine.pad_token_id == 2
    rollout = generate_rollout(engine, make_items(PROMPTS, tokenizer), generate_settings(n=2, max_new_tokens=4),
                               seed=0)
    assert rollout.responses.shape == (8, 4)
    assert rollout.prompt_text[0] == "12+34="
    assert rollout.response_text == tokenizer.batch_decode(
        [row[: int(n)] for row, n in zip(rollout.responses.tolist(), rollout.loss_mask.sum(1))],
        skip_special_tokens=True)


def test_a_tiktoken_tokenizer_model_loads(tmp_path):
    # the tiktoken format (Llama 3's original tokenizer.model): one "base64(token) rank" line per token
    ranks = {bytes([i]): i for i in range(256)} | {b"12": 256, b"34": 257}
    (tmp_path / "tokenizer.model").write_text(
        "".join(f"{base64.b64encode(token).decode()} {rank}\n" for token, rank in ranks.items()))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|eot_id|>"}))
    tokenizer = load_tokenizer(str(tmp_path))
    ids = tokenizer("12+34=")["input_ids"]
    assert ids[0] == 256 and tokenizer.decode(ids) == "12+34="
    assert tokenizer.eos_token_id is not None
