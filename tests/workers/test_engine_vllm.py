"""The vllm engine (rlgraph/workers/engines/vllm.py) on vLLM's CPU build, against the actor's own forward pass.

One engine for the whole module (start-up is ~10 s in process): the tests take turns with its weights, and
each one that changes them loads the weights it compares against first. The model is the tiny random Llama of
conftest.py (head_dim 8, grouped KV heads): vLLM's CPU kernel has no head size 8, so its heads are widened
(vllm_heads.py), and these tests are what proves that changes nothing.
"""

from __future__ import annotations

import collections

import pytest
import torch

from .helpers import EOS, actor_settings, generate_settings, log_prob_settings, make_items
from rlgraph.contract.settings import LoraSettings
from rlgraph.workers import PolicyWorker
from rlgraph.workers.engines import SamplingParams
from rlgraph.workers.rollout import generate_rollout
from rlgraph.workers.weight_sync import receive_weights, send_weights
from tests.tolerances import FP32_REORDERED

pytest.importorskip("vllm", reason="the vllm engine needs vLLM (`make install` brings its CPU build)")
from rlgraph.workers.engines.vllm import VLLMEngine, engine_args, start_failure  # noqa: E402

PROMPTS = ["12+34=", "5+6=", "7=", "99+1="]
MAX_NEW = 6


def _process_state() -> tuple:
    import os

    return (os.environ.get("LD_PRELOAD"), os.environ.get("LOCAL_WORLD_SIZE"), torch.get_num_threads(),
            torch.set_num_threads, torch.get_rng_state())


STARTED: dict[str, tuple] = {}  # the process's state before and after the engine started (the fixture's)


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    STARTED["before"] = _process_state()
    engine = VLLMEngine.from_pretrained(tiny_model_dir, dtype="float32", device="cpu", max_sequences=32)
    STARTED["after"] = _process_state()
    yield engine
    engine.shutdown()


def test_starting_the_engine_leaves_the_trainers_process_as_it_was(engine):
    # vLLM's start-up seeds the RNGs, sets torch's threads, patches set_num_threads and sets LD_PRELOAD: put back
    (*before, rng_before), (*after, rng_after) = STARTED["before"], STARTED["after"]
    assert before == after and torch.equal(rng_before, rng_after)


@pytest.fixture(scope="module")
def actor(tiny_model_dir):
    return PolicyWorker(tiny_model_dir, actor_settings(), seed=0)


@pytest.fixture(scope="module")
def items(tokenizer):
    return make_items(PROMPTS, tokenizer)


@torch.no_grad()
def an_update(module: torch.nn.Module, seed: int) -> None:
    """Move every weight as a training step would (the engine must then see other tokens and log-probs)."""
    generator = torch.Generator().manual_seed(seed)
    for parameter in module.parameters():
        parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))


def assert_engine_matches(engine, policy: PolicyWorker, items, temperature: float = 0.0, n: int = 1) -> None:
    """The engine's samples, with their kept log-probs, are what the policy's own forward pass gives them; greedy,
    its tokens are the policy's greedy tokens too."""
    settings = generate_settings(n=n, temperature=temperature, max_new_tokens=MAX_NEW, keep_log_probs=True)
    rollout = generate_rollout(engine, items, settings, seed=3)
    scored = policy.log_prob(rollout, settings=log_prob_settings(temperature=temperature or 1.0))
    mask = rollout.response_mask.bool()
    torch.testing.assert_close(rollout.sample_log_probs[mask], scored[mask], **FP32_REORDERED)
    if temperature == 0:
        assert torch.equal(rollout.responses, policy.generate(items, settings=settings).responses)


# --- weights reach the engine ---


def test_after_a_sync_of_the_state_dict_the_engine_is_the_actor(engine, actor, items):
    # the colocated path: the actor's whole state dict (DeviceProcess -> RolloutWorker.load_state_dict)
    an_update(actor.module, seed=1)
    engine.load_weights(actor.state_dict())
    assert_engine_matches(engine, actor, items)


def test_after_a_bucketed_stream_the_engine_is_the_actor(engine, actor, items):
    # the own-pool path: the weights streamed bucket by bucket, as over the sync group (workers/weight_sync.py)
    an_update(actor.module, seed=2)
    wire: collections.deque[torch.Tensor] = collections.deque()
    buckets: list[int] = []

    def load(bucket):
        buckets.append(len(bucket))
        engine.load_weights(bucket)

    send_weights(actor.module, lambda t: wire.append(t.clone()), cap=16 * 1024)
    receive_weights(lambda t: t.copy_(wire.popleft()), load)
    assert len(buckets) > 1 and not wire
    assert_engine_matches(engine, actor, items)


def test_a_lora_actors_merged_weights(engine, tiny_model_dir, items):
    lora = PolicyWorker(tiny_model_dir, actor_settings(lora=LoraSettings(rank=4, alpha=8.0, dropout=0.0,
                                                                         target_modules="all-linear")), seed=0)
    with torch.no_grad():  # adapters start at B = 0 (the base model): give them a learned-looking B
        for name, parameter in lora.module.named_parameters():
            if "lora_B" in name:
                parameter.add_(0.2 * torch.randn(parameter.shape, generator=torch.Generator().manual_seed(4)))
    wire: collections.deque[torch.Tensor] = collections.deque()
    send_weights(lora.module, lambda t: wire.append(t.clone()))  # merges each adapter into its layer as it sends
    receive_weights(lambda t: t.copy_(wire.popleft()), engine.load_weights)
    assert_engine_matches(engine, lora, items)


def test_sampled_log_probs_are_the_actors_at_the_temperature(engine, actor, items):
    engine.load_weights(actor.state_dict())
    assert_engine_matches(engine, actor, items, temperature=0.7, n=3)


def test_unknown_weight_names_are_refused(engine):
    with pytest.raises(ValueError, match="no parameter named model.nope.weight"):
        engine.load_weights({"model.nope.weight": torch.zeros(2)})


# --- sampling ---


def test_n_rows_stop_ids_and_max_new_tokens(engine, items):
    ids = [item["input_ids"] for item in items]
    rows = engine.generate(ids, 3, SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0), seed=5).token_ids
    assert len(rows) == len(ids) * 3 and all(1 <= len(row) <= MAX_NEW for row in rows)
    assert all(row[-1] == EOS for row in rows if len(row) < MAX_NEW) and all(EOS not in row[:-1] for row in rows)
    greedy = engine.generate(ids, 2, SamplingParams(max_new_tokens=MAX_NEW, greedy=True)).token_ids
    assert all(greedy[2 * i] == greedy[2 * i + 1] for i in range(len(ids)))  # a prompt's n samples are adjacent
    # a stop id ends a response and is kept as its last token (a tool call's closing tag)
    first = greedy[0][0]
    stopped = engine.generate(ids[:1], 1, SamplingParams(max_new_tokens=MAX_NEW, greedy=True,
                                                         stop_token_ids=(first,))).token_ids
    assert stopped == [[first]]


def test_same_seed_same_tokens_another_seed_others(engine, items):
    ids = [item["input_ids"] for item in items]
    sampling = SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0)
    first = engine.generate(ids, 4, sampling, seed=11, with_log_probs=True)
    again = engine.generate(ids, 4, sampling, seed=11, with_log_probs=True)
    assert first.token_ids == again.token_ids and first.log_probs == again.log_probs
    assert engine.generate(ids, 4, sampling, seed=12).token_ids != first.token_ids
    assert len({tuple(row) for row in first.token_ids[:4]}) > 1  # the n samples of a prompt have seeds of their own


def test_release_refuses_generation_and_resume_keeps_the_results(engine, actor, items):
    engine.load_weights(actor.state_dict())
    ids = [item["input_ids"] for item in items]
    sampling = SamplingParams(max_new_tokens=MAX_NEW, temperature=1.0)
    before = engine.generate(ids, 2, sampling, seed=7, with_log_probs=True)
    engine.release_memory()
    with pytest.raises(RuntimeError, match="resume_memory"):
        engine.generate(ids, 2, sampling, seed=7)
    engine.load_weights(actor.state_dict())  # a sync while released is kept for the next generation
    engine.resume_memory()
    after = engine.generate(ids, 2, sampling, seed=7, with_log_probs=True)
    assert after.token_ids == before.token_ids and after.log_probs == before.log_probs


# --- settings and clear errors ---


def test_tp_beyond_one_cpu_is_refused_before_vllm_starts(tiny_model_dir):
    with pytest.raises(ValueError, match="at most 1 device"):
        VLLMEngine.from_pretrained(tiny_model_dir, dtype="float32", device="cpu", tp=2)


def test_engine_arguments_on_cpu_and_gpu():
    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 32,
              "max_position_embeddings": 64}
    cpu = engine_args("m", config, dtype="float32", on_gpu=False, memory_fraction=0.3, tp=1, max_sequences=8)
    # on CPU the KV cache holds max_num_seqs sequences of the model's length: K and V x layers x kv heads x the
    # head size the CPU kernel runs (8 widened to 32) x 4 bytes x 64 tokens x 8 sequences
    assert cpu["kv_cache_memory_bytes"] == 2 * 2 * 2 * 32 * 4 * 64 * 8 and "gpu_memory_utilization" not in cpu
    assert cpu["max_num_seqs"] == 8 and cpu["logprobs_mode"] == "processed_logprobs"
    gpu = engine_args("m", config, dtype="bfloat16", on_gpu=True, memory_fraction=0.3, tp=2, max_sequences=None)
    assert gpu["gpu_memory_utilization"] == 0.3 and gpu["enable_sleep_mode"] and gpu["tensor_parallel_size"] == 2
    assert "kv_cache_memory_bytes" not in gpu
    # tp workers as processes of the rollout's own (inside a placement group vLLM would wait on Ray for GPUs)
    assert gpu["distributed_executor_backend"] == "mp" and "distributed_executor_backend" not in cpu
    message = start_failure(ValueError("no room\nmore\nthird\nfourth"), cpu, on_gpu=False)
    assert "no room; more; third" in message and "fourth" not in message and "`max_sequences`" in message
    assert "max_model_len = 64" in message
    assert "`memory_fraction`" in start_failure(ValueError("x"), gpu, on_gpu=True)


def test_an_engine_that_cannot_start_names_the_setting_to_change(tiny_model_dir):
    # vLLM refuses a scheduler of more sequences than tokens per step (4096): a real start that fails
    with pytest.raises(RuntimeError, match=r"did not start .*max_num_seqs \(10000\).* `max_sequences` of the rollout"):
        VLLMEngine.from_pretrained(tiny_model_dir, dtype="float32", device="cpu", max_sequences=10_000)
