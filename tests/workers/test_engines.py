"""Rollout engines through their interface (rlgraph/workers/engines/): token ids in, token ids out."""

import subprocess
import sys

import pytest
import torch

from .helpers import EOS
from rlgraph.workers.engines import ENGINES, EngineCapabilities, SamplingParams, engine_class
from rlgraph.workers.engines.hf import HFEngine

PROMPTS = [[4, 5, 13, 6, 7, 14], [8, 13, 9, 14], [10, 14]]  # "12+34=", "5+6=", "7=" (helpers.ALPHABET)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    return HFEngine.from_pretrained(tiny_model_dir, dtype="float32", device="cpu", memory_fraction=0.5)


def sample(engine, seed=1, n=3, **settings):
    return engine.generate(PROMPTS, n, SamplingParams(max_new_tokens=6, **settings), seed=seed).token_ids


def test_prompts_are_token_ids_of_the_test_tokenizer(tokenizer):
    assert [tokenizer(text)["input_ids"] for text in ("12+34=", "5+6=", "7=")] == PROMPTS


def test_registry_names_every_engine_by_its_capabilities():
    assert engine_class("hf") is HFEngine
    for name in ENGINES:
        capabilities = engine_class(name).capabilities
        assert isinstance(capabilities, EngineCapabilities) and capabilities.name == name
    assert HFEngine.capabilities is ENGINES["hf"] and HFEngine.capabilities.in_place
    with pytest.raises(ValueError, match="unknown rollout engine 'nope'; this runtime has: hf, sglang, vllm"):
        engine_class("nope")


def test_reading_the_registry_imports_no_torch():
    code = ("import sys; from rlgraph.workers.engines import ENGINES, EngineCapabilities\n"
            "assert not {'torch', 'transformers'} & set(sys.modules), sorted(sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_token_ids_out_end_at_the_first_stop_token(engine):
    rows = sample(engine, n=3)
    assert len(rows) == 9
    assert all(1 <= len(row) <= 6 for row in rows)
    # a row shorter than max_new_tokens ended with EOS, and nothing follows EOS
    assert all(row[-1] == EOS for row in rows if len(row) < 6)
    assert all(EOS not in row[:-1] for row in rows)
    # the n samples of a prompt are adjacent: greedy gives n copies
    greedy = sample(engine, n=2, greedy=True)
    assert greedy[0] == greedy[1] and greedy[2] == greedy[3]


def test_same_seed_same_tokens_and_the_global_rng_is_untouched(engine):
    before = torch.get_rng_state()
    assert sample(engine, seed=7) == sample(engine, seed=7)
    assert sample(engine, seed=7) != sample(engine, seed=8)
    assert torch.equal(torch.get_rng_state(), before)
    assert sample(engine, temperature=0.0) == sample(engine, greedy=True)  # temperature 0 is greedy


def test_kept_log_probs_match_a_full_forward_pass(engine):
    temperature = 0.7
    out = engine.generate(PROMPTS, 2, SamplingParams(max_new_tokens=6, temperature=temperature, top_k=3), seed=3,
                          with_log_probs=True)
    assert [len(lp) for lp in out.log_probs] == [len(ids) for ids in out.token_ids]
    with torch.no_grad():
        for row, (ids, kept) in enumerate(zip(out.token_ids, out.log_probs)):
            prompt = PROMPTS[row // 2]
            tokens = torch.tensor([prompt + ids])
            logits = engine.module(input_ids=tokens).logits[0, len(prompt) - 1 : -1].float() / temperature
            full = torch.log_softmax(logits, dim=-1).gather(-1, tokens[0, len(prompt) :, None]).squeeze(-1)
            # the untruncated distribution: top-k chose which tokens could be drawn, not their log-probs
            torch.testing.assert_close(torch.tensor(kept), full, rtol=0, atol=1e-4)
    assert engine.generate(PROMPTS, 1, SamplingParams(max_new_tokens=2), seed=3).log_probs is None


def test_load_weights_changes_the_samples(tiny_model_dir):
    engine = HFEngine.from_pretrained(tiny_model_dir, dtype="float32", device="cpu", memory_fraction=None)
    norm = engine.module.model.norm.weight.detach().clone()
    before = sample(engine, greedy=True)
    engine.load_weights({"model.norm.weight": torch.zeros_like(norm)})  # all logits 0: greedy picks token 0
    assert sample(engine, greedy=True) == [[0] * 6] * 9
    engine.load_weights([("model.norm.weight", norm)])  # (name, tensor) pairs, as SGLang takes them
    assert sample(engine, greedy=True) == before
    with pytest.raises(ValueError, match="no parameter named model.nrom.weight"):
        engine.load_weights({"model.nrom.weight": norm})


def test_release_and_resume_memory(tiny_model_dir):
    engine = HFEngine.from_pretrained(tiny_model_dir, dtype="float32", device="cpu", memory_fraction=None)
    before = sample(engine, seed=5)
    engine.release_memory()
    with pytest.raises(RuntimeError, match="call resume_memory"):
        sample(engine, seed=5)
    engine.release_memory()  # twice is harmless
    engine.resume_memory()
    assert sample(engine, seed=5) == before
    engine.resume_memory()  # so is resuming what was not released
    assert sample(engine, seed=5) == before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU: on the CPU nothing is freed")
def test_release_memory_frees_the_gpu_and_resume_takes_it_back(tiny_model_dir):
    engine = HFEngine.from_pretrained(tiny_model_dir, dtype="float32", device="cuda", memory_fraction=None)
    before, held = sample(engine, seed=5), torch.cuda.memory_allocated()
    engine.release_memory()
    assert torch.cuda.memory_allocated() < held and next(engine.module.parameters()).device.type == "cpu"
    engine.resume_memory()
    assert next(engine.module.parameters()).device.type == "cuda"
    assert sample(engine, seed=5) == before


def test_sampling_params_are_checked():
    with pytest.raises(ValueError, match="max_new_tokens >= 1"):
        SamplingParams(max_new_tokens=0)
    with pytest.raises(ValueError, match="top_p=1.5"):
        SamplingParams(max_new_tokens=4, top_p=1.5)
    assert SamplingParams(max_new_tokens=4, temperature=0.0).greedy
