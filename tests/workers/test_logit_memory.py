"""Memory of full-vocabulary logits at a real vocabulary size (Qwen2's 152064), measured on the CPU.

The model is a one-layer Llama of hidden size 16, so the logits are nearly all of the memory a call
allocates. Peaks are counted by torch's profiler: every allocation and free of the CPU allocator while
the call runs, summed in order (tensors that existed before the call are not counted).
"""

from __future__ import annotations

import pytest
import torch

from rlgraph.workers import logits as chunked
from rlgraph.workers.engines.base import SamplingParams
from rlgraph.workers.engines.hf import HFEngine
from rlgraph.workers.policy import PolicyWorker

from .helpers import EOS, PAD, actor_settings, generate_settings, log_prob_settings, make_items
from tests.tolerances import FP32_REORDERED

VOCAB = 152064
STEP = VOCAB * 4  # bytes of one position's float32 logits
PROMPTS = [[3, 4, 5], [6, 7]]


def peak_bytes(fn) -> tuple[int, object]:
    """(the most bytes `fn` had allocated at once, its result)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    return peak, result


@pytest.fixture(scope="module")
def wide_model_dir(tmp_path_factory, tokenizer) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                         pad_token_id=PAD, eos_token_id=EOS, bos_token_id=None, tie_word_embeddings=True)
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("wide-llama")
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def actor(wide_model_dir) -> PolicyWorker:
    return PolicyWorker(wide_model_dir, actor_settings(), seed=0)


# --- kept log-probs (generate with_log_probs) ---


def test_kept_log_probs_hold_one_step_of_logits_not_every_step(actor):
    engine = HFEngine(actor.module, actor.tokenizer)
    batch = 2 * len(PROMPTS)

    def generate(tokens: int):
        return engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=tokens, temperature=0.7, top_k=50), seed=1,
                               with_log_probs=True)

    short, _ = peak_bytes(lambda: generate(8))
    peak, out = peak_bytes(lambda: generate(32))
    assert [len(ids) for ids in out.token_ids] == [32] * batch  # every step ran for every row
    # 24 more steps cost at most a couple of steps' (batch, vocab) logits, not 24 x 3 of them
    assert peak < short + 2 * batch * STEP, (short, peak)
    assert peak < 12 * batch * STEP, peak
    # and they are the log-probs of a full forward pass at the temperature, untruncated by top-k
    with torch.no_grad():
        for row, (ids, kept) in enumerate(zip(out.token_ids, out.log_probs)):
            prompt = PROMPTS[row // 2]
            tokens = torch.tensor([prompt + ids])
            logits = engine.module(input_ids=tokens).logits[0, len(prompt) - 1 : -1].float() / 0.7
            full = torch.log_softmax(logits, dim=-1).gather(-1, tokens[0, len(prompt) :, None]).squeeze(-1)
            torch.testing.assert_close(torch.tensor(kept), full, rtol=0, atol=1e-4)


# --- log-prob and entropy, a chunk of positions at a time ---


def whole_tensor(logits: torch.Tensor, tokens: torch.Tensor, temperature: float):
    """The formula before chunking: every float32 copy of the whole (batch, R, vocab) at once."""
    from rlgraph.algos import entropy_from_logits

    scores = logits.float() / temperature
    log_prob = torch.log_softmax(scores, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return log_prob, entropy_from_logits(scores)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_values_and_gradients_equal_the_whole_tensor_formula(dtype):
    generator = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(3, 10, 50, generator=generator)).to(dtype)
    tokens = torch.randint(0, 50, (3, 10), generator=generator)
    weights = torch.randn(2, 3, 10, generator=generator)

    def run(fn):
        leaf = logits.clone().requires_grad_(True)
        log_prob, entropy = fn(leaf)
        ((log_prob * weights[0]).sum() + (entropy * weights[1]).sum()).backward()
        return log_prob.detach(), entropy.detach(), leaf.grad

    expected = run(lambda x: whole_tensor(x, tokens, 0.7))
    for chunk_tokens in (3, 7, 1000):  # 1, 2 and all positions per chunk
        got = run(lambda x: chunked.token_log_probs(x, tokens, 0.7, with_entropy=True, chunk_tokens=chunk_tokens))
        for a, b in zip(got, expected):
            torch.testing.assert_close(a, b, **FP32_REORDERED)
    # without entropy_grad the entropy is a value only: the gradient is the log-prob's alone
    leaf = logits.clone().requires_grad_(True)
    log_prob, entropy = chunked.token_log_probs(leaf, tokens, 0.7, with_entropy=True, entropy_grad=False,
                                                chunk_tokens=7)
    assert not entropy.requires_grad
    torch.testing.assert_close(entropy, expected[1], **FP32_REORDERED)


def test_log_prob_holds_a_chunk_of_float32_logits_not_the_whole_batch(actor, tokenizer, monkeypatch):
    rollout = actor.generate(make_items(["12+3=", "4+56="], tokenizer),
                             settings=generate_settings(n=2, max_new_tokens=32, temperature=0.7), seed=3)
    batch, length = rollout.responses.shape
    assert (batch, length) == (4, 32)
    monkeypatch.setattr(chunked, "CHUNK_TOKENS", 16)  # 4 positions of 4 rows a chunk: 1/8 of the response
    settings = log_prob_settings(temperature=0.7)
    peak, (log_prob, entropy) = peak_bytes(lambda: actor.log_prob(rollout, settings=settings, with_entropy=True))
    # the model's own logits (R + 1 positions, float32 here), then a few float32 copies of one chunk
    # (before: four whole-batch copies: / T, log_softmax, softmax, softmax * logits)
    model_logits, chunk = batch * (length + 1) * STEP, 16 * STEP
    assert peak < model_logits + 8 * chunk, (peak, model_logits, chunk)
    with torch.no_grad():
        expected = whole_tensor(actor.response_logits(rollout), rollout.responses, 0.7)
    torch.testing.assert_close(log_prob, expected[0], **FP32_REORDERED)
    torch.testing.assert_close(entropy, expected[1], rtol=0, atol=1e-5)


def test_backward_holds_a_chunk_of_float32_logits_not_the_whole_batch():
    batch, length = 4, 32
    logits = torch.randn(batch, length, VOCAB, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    tokens = torch.randint(0, VOCAB, (batch, length))

    def step():
        log_prob, entropy = chunked.token_log_probs(logits, tokens, 0.7, with_entropy=True, chunk_tokens=8)
        (log_prob.sum() + 0.01 * entropy.sum()).backward()

    peak, _ = peak_bytes(step)
    # the gradient of the logits (the whole batch, once), then the float32 copies of one chunk at a time
    # (before: 8 whole-batch copies, the log_softmax and softmax kept for backward among them)
    whole, chunk = batch * length * STEP, 8 * STEP
    assert peak < whole + 12 * chunk, (peak, whole, chunk)
