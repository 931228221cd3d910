import shutil
from pathlib import Path

import pytest

from rlgraph.models.char_tokenizer import ALPHABET, _is_shipped_char_tokenizer, build_char_tokenizer, load_tokenizer
from rlgraph.models.registry import BUILTIN_MODELS, resolve_model_path


def test_one_id_per_character_and_no_bos():
    tokenizer = build_char_tokenizer()
    ids = tokenizer("12+34=")["input_ids"]
    assert len(ids) == 6 and tokenizer.bos_token_id not in ids
    assert ids == [tokenizer.convert_tokens_to_ids(c) for c in "12+34="]
    assert tokenizer.decode(tokenizer("a b = 7")["input_ids"]) == "a b = 7"  # spaces survive the round trip


def test_special_tokens_padding_and_unknowns():
    tokenizer = build_char_tokenizer()
    assert (tokenizer.pad_token, tokenizer.bos_token, tokenizer.eos_token) == ("<pad>", "<s>", "</s>")
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    assert len(tokenizer) == 4 + len(ALPHABET)
    assert tokenizer.padding_side == "left" and not tokenizer.chat_template
    batch = tokenizer(["1+1=", "12+34="], padding=True)
    assert batch["input_ids"][0][:2] == [0, 0] and batch["attention_mask"][0] == [0, 0, 1, 1, 1, 1]
    assert tokenizer("Z")["input_ids"] == [tokenizer.unk_token_id]
    assert tokenizer.decode([*tokenizer("46")["input_ids"], 2, 0], skip_special_tokens=True) == "46"


def test_saved_tokenizer_loads_with_auto_tokenizer(tmp_path):
    import json

    from transformers import AutoTokenizer

    from rlgraph.models.char_tokenizer import save_char_tokenizer

    save_char_tokenizer(build_char_tokenizer(), tmp_path)
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("12+34=")["input_ids"] == build_char_tokenizer()("12+34=")["input_ids"]
    assert loaded.padding_side == "left" and loaded.eos_token_id == 2 and loaded.pad_token_id == 0


@pytest.mark.parametrize("name", sorted(BUILTIN_MODELS))
def test_load_tokenizer_is_auto_tokenizer_for_every_shipped_model(name):
    """pre-flight's tokenizer (load_tokenizer, no AutoTokenizer import) is the one AutoTokenizer loads."""
    from transformers import AutoTokenizer

    from rlgraph.data import load_files

    folder = resolve_model_path(f"builtin:{name}")
    assert _is_shipped_char_tokenizer(Path(folder))  # the short way is the one taken
    fast, auto = load_tokenizer(folder), AutoTokenizer.from_pretrained(folder)
    assert type(fast) is type(auto)
    assert fast.get_vocab() == auto.get_vocab() and fast.all_special_tokens == auto.all_special_tokens
    assert (fast.padding_side, fast.pad_token_id, fast.eos_token_id, fast.model_max_length) == (
        auto.padding_side, auto.pad_token_id, auto.eos_token_id, auto.model_max_length)
    rows = load_files("builtin:arith/train")[:200]
    texts = [r["prompt"] if isinstance(r["prompt"], str) else r["prompt"][0]["content"] for r in rows]
    texts += [str(r["reward_model"]["ground_truth"]) for r in rows] + ["<tool_call>7*8</tool_call> x?~"]
    assert fast(texts)["input_ids"] == auto(texts)["input_ids"]
    batch = [fast(texts[:8], padding=True)["input_ids"], auto(texts[:8], padding=True)["input_ids"]]
    assert batch[0] == batch[1]
    assert [fast.decode(i, skip_special_tokens=True) for i in batch[0]] == [
        auto.decode(i, skip_special_tokens=True) for i in batch[1]]


def test_load_tokenizer_takes_auto_tokenizer_outside_the_shipped_folders(tmp_path):
    """A copy of a built-in's folder is not pinned: it loads as AutoTokenizer loads it, by its own files."""
    copy = tmp_path / "model"
    shutil.copytree(resolve_model_path("builtin:arith-gpt"), copy)
    assert not _is_shipped_char_tokenizer(copy)
    assert load_tokenizer(copy)("12+34=")["input_ids"] == load_tokenizer(resolve_model_path("builtin:arith-gpt"))(
        "12+34=")["input_ids"]
