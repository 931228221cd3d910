import torch

from .helpers import EOS, PAD, generate_settings, make_items
from rlgraph.workers.engines.hf import HFEngine
from rlgraph.workers.rollout import generate_rollout, left_pad, mask_after_eos


class ScriptedLM(torch.nn.Module):
    """Stands in for a causal LM: `generate` appends fixed continuations (HF pads after EOS, and stops early)."""

    def __init__(self, continuations: list[list[int]]) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.continuations = continuations
        self.calls = []

    def generate(self, input_ids, attention_mask, generation_config):
        self.calls.append((input_ids.clone(), attention_mask.clone(), generation_config))
        width = max(len(c) for c in self.continuations)
        tail = torch.tensor([c + [PAD] * (width - len(c)) for c in self.continuations])
        return torch.cat([input_ids, tail], dim=1)


def generate(engine, items, *, seed=None, uid_offset=0, **settings):
    """generate_rollout with every call argument spelled out, settings from the test's defaults."""
    return generate_rollout(engine, items, generate_settings(**settings), seed=seed, uid_offset=uid_offset,
                            policy_version=0)


def test_left_pad_and_eos_mask():
    ids, mask = left_pad([[5, 6], [7], [8, 9, 10]], PAD)
    assert ids.tolist() == [[PAD, 5, 6], [PAD, PAD, 7], [8, 9, 10]]
    assert mask.tolist() == [[0, 1, 1], [0, 0, 1], [1, 1, 1]]
    responses = torch.tensor([[4, EOS, 4, EOS], [4, 4, 4, 4], [EOS, PAD, PAD, PAD]])
    assert mask_after_eos(responses, EOS).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    # several stop tokens (chat models): the first of any ends the response
    assert mask_after_eos(torch.tensor([[4, 5, EOS, 4]]), [5, EOS]).tolist() == [[1, 1, 0, 0]]


def test_generate_post_processing_with_scripted_model(tokenizer):
    # 2 prompts x n=2; HF stopped after 3 tokens (every row hit EOS), we ask for 5 columns
    lm = ScriptedLM([[4, 5, EOS], [6, EOS, PAD], [EOS, PAD, PAD], [7, EOS, 9]])
    items = make_items(["1+2=", "3="], tokenizer, ["3", "3"])
    rollout = generate(HFEngine(lm, tokenizer), items, n=2, max_new_tokens=5, temperature=0.0)
    input_ids, attention_mask, config = lm.calls[0]
    assert config.do_sample is False and config.max_new_tokens == 5
    assert config.eos_token_id == [EOS] and config.pad_token_id == PAD
    # interleaved repeat: p0 p0 p1 p1, left-padded
    assert torch.equal(input_ids[0], input_ids[1]) and input_ids[2, :2].tolist() == [PAD, PAD]
    assert rollout.responses.shape == (4, 5) and rollout.input_ids.shape == (4, 4 + 5)
    assert rollout.response_mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]]
    # tokens after EOS are replaced by pad (the scripted row 3 had a 9 there)
    assert rollout.responses[3].tolist() == [7, EOS, PAD, PAD, PAD]
    assert rollout.uid == [0, 0, 1, 1]
    assert rollout.ground_truth == ["3", "3", "3", "3"] and rollout.prompt_text == ["1+2=", "1+2=", "3=", "3="]
    chars = tokenizer.convert_ids_to_tokens([4, 5, 6, 7])
    assert rollout.response_text == [chars[0] + chars[1], chars[2], "", chars[3]]
    # left-padded prompt rows start their positions at 0 on the first real token
    assert rollout.position_ids[2].tolist()[:4] == [0, 0, 0, 1]


def test_generate_truncates_to_max_new_tokens(tokenizer):
    lm = ScriptedLM([[4, 5, 6, 7]])
    rollout = generate(HFEngine(lm, tokenizer), make_items(["1="], tokenizer), n=1, max_new_tokens=3)
    assert rollout.responses.tolist() == [[4, 5, 6]] and rollout.response_mask.tolist() == [[1, 1, 1]]


def test_sampling_settings_and_greedy_at_zero_temperature(tokenizer):
    lm = ScriptedLM([[4]])
    engine = HFEngine(lm, tokenizer)
    generate(engine, make_items(["1="], tokenizer), max_new_tokens=2, temperature=0.7, top_p=0.9, top_k=5)
    config = lm.calls[-1][2]
    assert config.do_sample and (config.temperature, config.top_p, config.top_k) == (0.7, 0.9, 5)
    generate(engine, make_items(["1="], tokenizer), max_new_tokens=2, temperature=0.0)
    assert lm.calls[-1][2].do_sample is False


def test_real_model_shapes_seeding_and_uid_offset(tiny_model_dir, tokenizer):
    from transformers import AutoModelForCausalLM

    module = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    engine = HFEngine(module, tokenizer)
    items = make_items(["12+34=", "5+6=", "7="], tokenizer)
    a = generate(engine, items, n=3, max_new_tokens=6, seed=123, uid_offset=10)
    b = generate(engine, items, n=3, max_new_tokens=6, seed=torch.Generator().manual_seed(7))
    c = generate(engine, items, n=3, max_new_tokens=6, seed=123)
    assert a.responses.shape == (9, 6) and a.prompts.shape == (9, 6)
    assert a.uid == [10, 10, 10, 11, 11, 11, 12, 12, 12]
    assert torch.equal(a.responses, c.responses)  # same seed, same samples
    assert not torch.equal(a.responses, b.responses)
    assert torch.equal(a.prompts[3], a.prompts[5])
    # the mask is consistent with the tokens: 1 up to and including the first EOS
    assert torch.equal(a.response_mask, mask_after_eos(a.responses, EOS))
    assert (a.responses[a.response_mask == 0] == PAD).all()
    greedy = [generate(engine, items, n=2, max_new_tokens=6, temperature=0.0).responses for _ in range(2)]
    assert torch.equal(greedy[0], greedy[1]) and torch.equal(greedy[0][0], greedy[0][1])
