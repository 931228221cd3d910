from rlgraph.models.char_tokenizer import ALPHABET, build_char_tokenizer


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
