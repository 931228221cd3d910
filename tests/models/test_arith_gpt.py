import dataclasses
import json

import pytest
import torch

from rlgraph.models.eval import greedy_accuracy, greedy_completions
from rlgraph.tasks import arith

# Greedy accuracy of the shipped builtin:arith-gpt on builtin:arith/val: the `val/score/mean` at step 0
# of `make run` that README.md and docs/results.md state.
START_ACCURACY = 0.438


def test_folder_holds_a_plain_hugging_face_model(arith_gpt_dir, arith_gpt):
    model, tokenizer, report = arith_gpt
    assert (arith_gpt_dir / "model.safetensors").is_file()
    assert model.config.model_type == "llama" and model.config.tie_word_embeddings
    assert tokenizer("12+34=")["input_ids"] == [tokenizer.convert_tokens_to_ids(c) for c in "12+34="]
    assert tokenizer.padding_side == "left" and tokenizer.eos_token == "</s>"
    assert report["num_parameters"] == sum(p.numel() for p in model.parameters())
    assert 100_000 < report["num_parameters"] < 1_000_000


def test_starts_at_the_documented_accuracy_on_held_out_prompts(arith_gpt):
    model, tokenizer, report = arith_gpt
    val = arith.make_rows("val")
    accuracy = greedy_accuracy(model, tokenizer, val, max_new_tokens=4)
    # one of the 500 answers may flip on another CPU (a near tie in the argmax), no more
    assert accuracy == pytest.approx(START_ACCURACY, abs=0.002)
    assert report["val_accuracy"] == START_ACCURACY  # what the build measured when it made these bytes


def test_the_recipe_still_makes_the_shipped_kind_of_folder(tmp_path):
    from rlgraph.models.build_arith_gpt import Recipe, build_arith_gpt
    from rlgraph.models.registry import BUILTIN_MODELS

    # a few steps only: the full recipe made the shipped bytes (about 45 s)
    recipe = dataclasses.replace(Recipe(), max_steps=20, eval_every=10, eval_rows=20, accept_low=0.0, accept_high=1.0)
    report = build_arith_gpt(tmp_path / "gpt", recipe, log=lambda _: None)
    assert {p.name for p in (tmp_path / "gpt").iterdir()} == set(BUILTIN_MODELS["arith-gpt"].sha256)
    saved = json.loads((tmp_path / "gpt" / "rlgraph_build.json").read_text())
    assert saved["steps"] == 20 and [step for step, _ in saved["checks"]] == [10, 20]
    assert saved["num_parameters"] == report["num_parameters"] == 265_920


def test_left_padded_batches_decode_like_single_prompts(arith_gpt):
    model, tokenizer, _ = arith_gpt
    prompts = [tokenizer(r["prompt"])["input_ids"] for r in arith.make_rows("val")[:8]]
    prompts += [tokenizer("1+2=")["input_ids"], tokenizer("0+0=")["input_ids"]]  # shortest prompts: most padding
    batched = greedy_completions(model, tokenizer, prompts, max_new_tokens=4, batch_size=64)
    alone = [greedy_completions(model, tokenizer, [p], max_new_tokens=4)[0] for p in prompts]
    assert batched == alone


def test_left_padding_with_position_ids_matches_the_unpadded_forward(arith_gpt):
    model, tokenizer, _ = arith_gpt
    short, long = tokenizer("1+2=")["input_ids"], tokenizer("12+34=")["input_ids"]
    input_ids = torch.tensor([[0, 0, *short], long])
    attention_mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1] * 6])
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        padded = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
        alone = model(input_ids=torch.tensor([short])).logits
    torch.testing.assert_close(padded[0, 2:], alone[0], atol=1e-5, rtol=1e-5)


def test_accuracy_accepts_dataset_items(arith_gpt):
    from rlgraph.data import RLDataset

    model, tokenizer, _ = arith_gpt
    rows = arith.make_rows("val")[:50]
    items = list(RLDataset(rows, tokenizer))
    assert greedy_accuracy(model, tokenizer, items) == greedy_accuracy(model, tokenizer, rows)
