import torch

from rlgraph.models.eval import greedy_accuracy, greedy_completions
from rlgraph.tasks import arith


def test_folder_holds_a_plain_hugging_face_model(arith_gpt_dir, arith_gpt):
    model, tokenizer, report = arith_gpt
    assert (arith_gpt_dir / "model.safetensors").is_file()
    assert model.config.model_type == "llama" and model.config.tie_word_embeddings
    assert tokenizer("12+34=")["input_ids"] == [tokenizer.convert_tokens_to_ids(c) for c in "12+34="]
    assert tokenizer.padding_side == "left" and tokenizer.eos_token == "</s>"
    assert report["num_parameters"] == sum(p.numel() for p in model.parameters())
    assert 100_000 < report["num_parameters"] < 1_000_000


def test_starts_half_way_on_held_out_prompts(arith_gpt):
    model, tokenizer, report = arith_gpt
    val = arith.make_rows("val")
    accuracy = greedy_accuracy(model, tokenizer, val, max_new_tokens=4)
    assert 0.30 <= accuracy <= 0.70
    assert abs(accuracy - report["val_accuracy"]) <= 0.01  # loading loses nothing (threads may differ)


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
