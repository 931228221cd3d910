"""The SGLang engine (rlgraph/workers/engines/sglang.py).

No machine of this project can run SGLang, so the tests come in three kinds:
- its pure parts, here: the sampling parameters, the server arguments, and SGLang-shaped output dicts
  turned into a Rollout the way every engine's output is;
- its call sequence against a stand-in for `sglang.Engine` (the one thing that needs a GPU);
- where sglang imports: its calls against the installed package's signatures, and on a GPU a real run.
"""

from __future__ import annotations

import dataclasses
import inspect
import math

import pytest
import torch

from .helpers import EOS, PAD, generate_settings, make_items
from rlgraph.workers.engines import SamplingParams, engine_class
from rlgraph.workers.engines.sglang import (SGLangEngine, generation_from_outputs, row_seeds, sampling_params,
                                            server_args)
from rlgraph.workers.rollout import build_rollout, generate_rollout

SKIP_REASON = "sglang is not installed (GPU extra)"
TURN_END = 13  # a second end-of-turn id (the "+" of the test alphabet), as a chat model's generation config lists


def sglang_output(tokens: list[int], log_probs: list[float], finish: dict | None = None) -> dict:
    """One request's answer as SGLang's Engine.generate returns it with return_logprob=True."""
    meta = {"output_token_logprobs": [(lp, t, None) for t, lp in zip(tokens, log_probs)],
            "finish_reason": finish or {"type": "length", "length": len(tokens)},
            "completion_tokens": len(tokens)}
    return {"text": "", "meta_info": meta}


# ---- pure parts ----------------------------------------------------------------------------------


def test_sampling_settings_map_onto_sglangs_sampling_params():
    sampled = sampling_params(SamplingParams(max_new_tokens=7, temperature=0.7, top_p=0.9, top_k=0), [EOS, TURN_END],
                              seed=5)
    assert sampled == {"max_new_tokens": 7, "stop_token_ids": [EOS, TURN_END], "no_stop_trim": True,
                       "temperature": 0.7, "top_p": 0.9, "top_k": -1, "sampling_seed": 5}
    assert sampling_params(SamplingParams(max_new_tokens=3, top_k=20), [EOS], None)["top_k"] == 20
    greedy = sampling_params(SamplingParams(max_new_tokens=3, temperature=0.0, top_k=5), [EOS], None)
    assert greedy == {"max_new_tokens": 3, "stop_token_ids": [EOS], "no_stop_trim": True, "temperature": 0.0}


def test_every_sample_gets_its_own_seed_drawn_from_the_calls_seed():
    seeds = row_seeds(7, 6)
    assert len(set(seeds)) == 6 and seeds == row_seeds(7, 6) != row_seeds(8, 6)
    assert all(0 <= s < 2**63 for s in seeds)
    assert row_seeds(None, 3) == [None, None, None]


def test_server_args_name_the_folder_device_share_and_tp():
    args = server_args("/models/m", dtype="bfloat16", device="cuda:3", memory_fraction=0.4, tp=2)
    assert args == {"model_path": "/models/m", "tokenizer_path": "/models/m", "tp_size": 2, "dtype": "bfloat16",
                    "base_gpu_id": 3, "enable_memory_saver": True, "enable_weights_cpu_backup": True,
                    "mem_fraction_static": 0.4}
    assert server_args("/m", dtype=torch.float16, device=None, memory_fraction=None, tp=1)["dtype"] == "float16"
    assert "mem_fraction_static" not in server_args("/m", dtype="bfloat16", device=None, memory_fraction=None, tp=1)
    with pytest.raises(ValueError, match="runs on CUDA GPUs, not on 'cpu'; use engine = hf"):
        server_args("/m", dtype="float32", device="cpu", memory_fraction=None, tp=1)


def test_deterministic_runs_turn_on_the_only_mode_in_which_sglang_reads_the_seeds():
    args = server_args("/m", dtype="bfloat16", device="cuda:0", memory_fraction=None, tp=1, deterministic=True)
    assert args["enable_deterministic_inference"] is True
    assert "enable_deterministic_inference" not in server_args("/m", dtype="bfloat16", device="cuda:0",
                                                               memory_fraction=None, tp=1)


def test_train_deterministic_reaches_the_sglang_engine_the_process_builds(monkeypatch, tiny_model_dir):
    """WorkerSpec (train.deterministic) -> DeviceProcess -> RolloutWorker -> SGLangEngine.from_pretrained ->
    sglang.Engine's arguments, with a stand-in sglang package (the real one needs a GPU)."""
    import sys
    import types

    from rlgraph.runtime.process import DeviceProcess, HostedRole
    from rlgraph.runtime.roles import WorkerSpec
    from tests.workers.helpers import rollout_settings

    started: list[dict] = []

    class Engine(StandInEngine):
        def __init__(self, **kwargs):
            super().__init__()
            started.append(kwargs)

    constants = types.SimpleNamespace(GPU_MEMORY_ALL_TYPES=["weights", "kv_cache", "cuda_graph"])
    for name, module in {"sglang": types.SimpleNamespace(Engine=Engine), "sglang.srt": types.SimpleNamespace(),
                         "sglang.srt.constants": constants}.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # the one GPU the process would see
    for deterministic in (True, False):
        spec = WorkerSpec("rollout", "rollout", "rollout", tiny_model_dir, rollout_settings(engine="sglang"), seed=1,
                          deterministic=deterministic)
        worker = DeviceProcess("p0", 0, [HostedRole(spec, 0)], num_threads=1)._build(spec)
        assert isinstance(worker.engine, SGLangEngine)
    assert [kwargs.get("enable_deterministic_inference", False) for kwargs in started] == [True, False]


def test_sglang_outputs_become_a_rollout_cut_at_the_first_end_of_turn_id(tokenizer):
    items = make_items(["12+34=", "5="], tokenizer)
    outputs = [
        sglang_output([5, 6, EOS], [-0.1, -0.2, -0.3], {"type": "stop", "matched": EOS}),
        sglang_output([7, TURN_END], [-0.4, -0.5], {"type": "stop", "matched": TURN_END}),  # the other stop id
        sglang_output([8, 9, 10, 11], [-0.6, -0.7, -0.8, -0.9]),  # ran to max_new_tokens
        sglang_output([4, EOS, 5], [-1.0, -1.1, -1.2]),  # anything after a stop token is not the response's
    ]
    generation = generation_from_outputs(outputs, [EOS, TURN_END], max_new_tokens=4, with_log_probs=True)
    assert generation.token_ids == [[5, 6, EOS], [7, TURN_END], [8, 9, 10, 11], [4, EOS]]
    rollout = build_rollout(items, 2, generation, tokenizer, PAD, 4)
    assert rollout.responses.tolist() == [[5, 6, EOS, PAD], [7, TURN_END, PAD, PAD], [8, 9, 10, 11], [4, EOS, PAD, PAD]]
    assert rollout.loss_mask.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]]
    assert rollout.reward_index.tolist() == [2, 1, 3, 1]
    assert rollout.uid == [0, 0, 1, 1]
    expected = [[-0.1, -0.2, -0.3, 0.0], [-0.4, -0.5, 0.0, 0.0], [-0.6, -0.7, -0.8, -0.9], [-1.0, -1.1, 0.0, 0.0]]
    assert torch.allclose(rollout.sample_log_probs, torch.tensor(expected))
    assert rollout.response_text[0] == "23"
    assert generation_from_outputs(outputs, [EOS], 4, with_log_probs=False).log_probs is None


def test_an_aborted_request_is_an_error_not_a_short_response():
    aborted = sglang_output([5], [-0.1], {"type": "abort", "message": "out of memory"})
    with pytest.raises(RuntimeError, match="SGLang aborted sample 0: out of memory"):
        generation_from_outputs([aborted], [EOS], 4, with_log_probs=False)


# ---- the call sequence, against a stand-in for the GPU-only sglang.Engine ----------------------------


class StandInEngine:
    """Answers like sglang.Engine (each request: token 7, then EOS) and records the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def generate(self, input_ids, sampling_params, return_logprob):
        self.calls.append(("generate", input_ids, sampling_params, return_logprob))
        return [sglang_output([7, EOS], [-0.5, -0.25]) for _ in input_ids]

    def update_weights_from_tensor(self, named_tensors, flush_cache):
        self.calls.append(("update_weights_from_tensor", [name for name, _ in named_tensors], flush_cache))
        return True, "Succeeded to update parameter online."

    def flush_cache(self):
        self.calls.append(("flush_cache",))

    def release_memory_occupation(self):
        self.calls.append(("release_memory_occupation",))

    def resume_memory_occupation(self, tags=None):
        self.calls.append(("resume_memory_occupation", tags))


@pytest.fixture
def adapter(tokenizer):
    return SGLangEngine(StandInEngine(), tokenizer, eos_token_ids=[EOS, TURN_END],
                        weight_names={"model.embed_tokens.weight", "model.norm.weight"},
                        memory_types=("kv_cache", "weights", "cuda_graph"))


def test_generate_sends_each_prompt_n_times_with_its_own_seed_and_keeps_log_probs(adapter, tokenizer):
    items = make_items(["5=", "12+3="], tokenizer)
    rollout = generate_rollout(adapter, items, generate_settings(n=2, max_new_tokens=3, keep_log_probs=True), seed=3)
    (name, input_ids, params, return_logprob), = adapter.engine.calls
    assert name == "generate" and return_logprob is True
    assert input_ids == [items[0]["input_ids"]] * 2 + [items[1]["input_ids"]] * 2
    assert [p["sampling_seed"] for p in params] == row_seeds(3, 4)
    assert all(p["stop_token_ids"] == [EOS, TURN_END] and p["max_new_tokens"] == 3 for p in params)
    assert rollout.responses.tolist() == [[7, EOS, PAD]] * 4
    assert rollout.response_text == ["4"] * 4
    assert rollout.sample_log_probs[:, :2].tolist() == [[-0.5, -0.25]] * 4


def test_weights_come_back_before_a_sync_and_the_prefix_cache_is_flushed_before_sampling(adapter, tokenizer):
    items = make_items(["5="], tokenizer)
    settings = generate_settings(n=1, max_new_tokens=3)
    adapter.release_memory()
    adapter.release_memory()  # once is enough
    with pytest.raises(RuntimeError, match="resume_memory"):
        generate_rollout(adapter, items, settings)
    adapter.load_weights({"model.norm.weight": torch.ones(4)})
    adapter.load_weights([("lm_head.weight", torch.ones(4, 4))])  # a tied head the checkpoint does not store
    adapter.resume_memory()
    generate_rollout(adapter, items, settings)
    generate_rollout(adapter, items, settings)
    assert [c[:2] for c in adapter.engine.calls] == [
        ("release_memory_occupation",),
        ("resume_memory_occupation", ["weights"]),  # the weights' memory only: the KV cache stays free
        ("update_weights_from_tensor", ["model.norm.weight"]),
        ("update_weights_from_tensor", ["lm_head.weight"]),
        ("resume_memory_occupation", ["kv_cache", "cuda_graph"]),
        ("flush_cache",),  # once, after the new weights
        ("generate", [items[0]["input_ids"]]),
        ("generate", [items[0]["input_ids"]]),
    ]


def test_a_sync_into_sglang_keeps_every_bucket_until_the_update_ends(tokenizer):
    """SGLang answers update_weights_from_tensor once its copies are queued, keeping no reference to the
    tensors: the receiving process must not free a bucket (and receive the next into its memory) before the
    update ends. DeviceProcess.receive_weights, over a stand-in group, into the adapter."""
    import weakref
    from collections import deque

    from rlgraph.runtime.process import DeviceProcess
    from rlgraph.workers import RolloutWorker
    from rlgraph.workers import weight_sync as ws

    class ReadsLater(StandInEngine):
        buffers: list[weakref.ref] = []
        alive: list[int] = []

        def update_weights_from_tensor(self, named_tensors, flush_cache):
            self.buffers.append(weakref.ref(named_tensors[0][1]._base))
            self.alive.append(sum(ref() is not None for ref in self.buffers))
            return super().update_weights_from_tensor(named_tensors, flush_cache)

    wire: deque = deque()

    class Group:  # a broadcast from rank 0 that replays what the sender put on the wire
        def broadcast(self, tensor, root):
            tensor.copy_(wire.popleft())
            return self

        def wait(self):
            pass

    sender = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    ws.send_weights(sender, lambda t: wire.append(t.view(torch.uint8).clone()), cap=64)
    worker = object.__new__(RolloutWorker)
    worker.engine = SGLangEngine(ReadsLater(), tokenizer, eos_token_ids=[EOS], weight_names=None, memory_types=())
    process = DeviceProcess("p1", 0, [], num_threads=1)
    process.workers["rollout"] = worker
    process.sync_groups["actor->rollout"] = (Group(), "gloo")
    process.receive_weights("rollout", "actor->rollout")
    assert not wire and len(ReadsLater.buffers) == 4  # four tensors, one bucket each at this cap
    assert ReadsLater.alive == [1, 2, 3, 4]  # no bucket freed while the update ran
    assert all(ref() is None for ref in ReadsLater.buffers)  # and none kept after it


def test_a_colocated_sync_into_sglang_hands_it_bf16_buckets_kept_until_the_update_ends(tokenizer):
    """Path in_process (DeviceProcess.sync_in_process): the actor's fp32 weights go to the adapter in the
    rollout's dtype, in buckets on this process's device, with no group and no host copy (SGLang then takes
    them as CUDA-IPC handles); every bucket stays allocated, holding what it was handed, until the update ends."""
    import weakref

    from rlgraph.runtime.process import DeviceProcess
    from rlgraph.workers import RolloutWorker

    class ReadsLater(StandInEngine):
        buffers: list[tuple[weakref.ref, torch.Tensor]] = []  # (the bucket, what it held when handed over)
        handed: dict[str, torch.Tensor] = {}
        at_the_last: list[bool] = []  # at the last bucket: every earlier one alive and unchanged

        def update_weights_from_tensor(self, named_tensors, flush_cache):
            base = named_tensors[0][1]._base
            self.buffers.append((weakref.ref(base), base.clone()))
            self.handed.update((name, t.clone()) for name, t in named_tensors)
            if len(self.buffers) == 4:  # four tensors, one bucket each at this cap
                self.at_the_last.append(all(ref() is not None and torch.equal(ref(), then)
                                            for ref, then in self.buffers))
            return super().update_weights_from_tensor(named_tensors, flush_cache)

    class Actor:  # what sync_in_process reads of the source's worker
        module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))

    engine = ReadsLater()
    worker = object.__new__(RolloutWorker)
    worker.engine = SGLangEngine(engine, tokenizer, eos_token_ids=[EOS], weight_names=None, memory_types=())
    process = DeviceProcess("actor/0", 0, [], num_threads=1)
    process.workers.update(actor=Actor(), rollout=worker)
    assert process.sync_in_process("actor", "rollout", 64, "bfloat16") > 0
    assert engine.at_the_last == [True]
    assert all(ref() is None for ref, _ in engine.buffers)  # and none kept after the update
    expected = {n: t.detach().to(torch.bfloat16) for n, t in Actor.module.state_dict().items()}
    assert engine.handed.keys() == expected.keys()
    assert all(engine.handed[n].dtype == torch.bfloat16 and torch.equal(engine.handed[n], t) for n, t in expected.items())
    assert worker.engine.cache_stale  # the next generate flushes SGLang's prefix cache first


def test_an_own_pool_sync_has_sglangs_schedulers_join_the_group_and_take_each_bucket(tokenizer):
    """DeviceProcess.join_engine_weight_sync and receive_weights_in_engine into the adapter: the schedulers join as
    ranks from the offset, then each bucket of the layout rank 0 gave is one update_weights_from_distributed
    (flattened, in the bucket's dtype, no cache flush per bucket); a failure SGLang reports is an error."""
    from rlgraph.runtime.process import DeviceProcess
    from rlgraph.workers import RolloutWorker
    from rlgraph.workers import weight_sync as ws

    class Schedulers(StandInEngine):
        answer = (True, "Succeeded to update parameter online.")

        def init_weights_update_group(self, **kwargs):
            self.calls.append(("init_weights_update_group", kwargs))
            return True, "ok"

        def update_weights_from_distributed(self, **kwargs):
            self.calls.append(("update_weights_from_distributed", kwargs))
            return self.answer

    class Actor:
        module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 4))

    engine = Schedulers()
    worker = object.__new__(RolloutWorker)
    worker.engine = SGLangEngine(engine, tokenizer, eos_token_ids=[EOS], weight_names=None, memory_types=(), tp=2)
    assert worker.engine.group_receiver() is None  # no sglang here: the rollout process receives, as before
    process = DeviceProcess("rollout/1", 0, [], num_threads=1)
    process.workers.update(actor=Actor(), rollout=worker)
    process.join_engine_weight_sync("rollout", "actor->rollout", "10.0.0.1", 29500, 3, 5)
    assert engine.calls == [("init_weights_update_group", dict(
        master_address="10.0.0.1", master_port=29500, rank_offset=3, world_size=5, group_name="actor->rollout",
        backend="nccl"))]
    engine.calls.clear()
    layout = process.weight_sync_layout("actor", 64, "bfloat16")
    assert process.receive_weights_in_engine("rollout", "actor->rollout", layout) >= 0
    buckets = ws.decoded_layout(layout)
    assert len(buckets) == len(engine.calls) > 1
    for bucket, (method, kwargs) in zip(buckets, engine.calls):
        assert method == "update_weights_from_distributed"
        assert kwargs == dict(names=list(bucket.names), dtypes=["bfloat16"] * len(bucket.names),
                              shapes=[list(s) for s in bucket.shapes], group_name="actor->rollout", flush_cache=False,
                              load_format="flattened_bucket")
    assert worker.engine.cache_stale
    engine.answer = (False, "Failed to update parameter online: shape mismatch")
    with pytest.raises(Exception, match="shape mismatch"):
        process.receive_weights_in_engine("rollout", "actor->rollout", layout)


def test_weights_of_another_architecture_are_refused(adapter):
    with pytest.raises(ValueError, match="no parameter named transformer.h.0.attn.weight"):
        adapter.load_weights({"transformer.h.0.attn.weight": torch.ones(1)})
    assert adapter.engine.calls == []


def test_the_engine_is_registered_with_its_capabilities():
    engine = engine_class("sglang")
    assert engine is SGLangEngine
    assert (engine.capabilities.kept_log_probs, engine.capabilities.memory_fraction,
            engine.capabilities.release_memory) == (True, True, True)
    assert engine.capabilities.max_tp > 1


def test_without_sglang_the_engine_names_the_extra():
    try:
        import sglang  # noqa: F401
    except Exception:
        pass
    else:
        pytest.skip("sglang is installed here")
    with pytest.raises(ImportError, match=r"pip install 'rlgraph\[sglang\]'"):
        SGLangEngine.check_installed()
    with pytest.raises(ImportError, match="sglang"):
        SGLangEngine.from_pretrained("builtin:arith-gpt", dtype="bfloat16", device="cuda:0", memory_fraction=0.5)


# ---- where sglang imports ------------------------------------------------------------------------


def _parameters(function) -> set[str]:
    return set(inspect.signature(function).parameters)


def _fields(record: type) -> set[str]:
    """The fields of ServerArgs, a dataclass in some SGLang versions and a msgspec Struct in others."""
    if dataclasses.is_dataclass(record):
        return {f.name for f in dataclasses.fields(record)}
    import msgspec

    return {f.name for f in msgspec.structs.fields(record)}


def test_the_adapters_calls_match_the_installed_sglang():
    sglang = pytest.importorskip("sglang", reason=SKIP_REASON)
    from sglang.srt.constants import GPU_MEMORY_ALL_TYPES, GPU_MEMORY_TYPE_WEIGHTS
    from sglang.srt.sampling.sampling_params import SamplingParams as SGLangSamplingParams
    from sglang.srt.server_args import ServerArgs

    from rlgraph.workers.engines.sglang import WEIGHTS

    engine = sglang.Engine
    assert {"input_ids", "sampling_params", "return_logprob"} <= _parameters(engine.generate)
    assert {"named_tensors", "flush_cache"} <= _parameters(engine.update_weights_from_tensor)
    assert "tags" in _parameters(engine.resume_memory_occupation)
    assert {"master_address", "master_port", "rank_offset", "world_size", "group_name", "backend"} <= _parameters(
        engine.init_weights_update_group)
    assert {"names", "dtypes", "shapes", "group_name", "flush_cache", "load_format"} <= _parameters(
        engine.update_weights_from_distributed)
    from sglang.srt.weight_sync.tensor_bucket import FlattenedTensorBucket  # what group_receiver reads

    assert isinstance(getattr(FlattenedTensorBucket, "supports_multi_dtypes", False), bool)
    for method in ("release_memory_occupation", "flush_cache", "shutdown"):
        assert callable(getattr(engine, method)), method
    assert WEIGHTS == GPU_MEMORY_TYPE_WEIGHTS and WEIGHTS in GPU_MEMORY_ALL_TYPES
    fields = _fields(ServerArgs)
    assert set(server_args("/m", dtype="bfloat16", device="cuda:1", memory_fraction=0.5, tp=2, max_sequences=8,
                           deterministic=True)) <= fields
    for sampling in (SamplingParams(max_new_tokens=4, temperature=0.8, top_p=0.9, top_k=0),
                     SamplingParams(max_new_tokens=4, temperature=0.0)):
        built = SGLangSamplingParams(**sampling_params(sampling, [EOS, TURN_END], seed=11))  # its own checks
        built.verify(vocab_size=32)
        assert built.stop_token_ids == {EOS, TURN_END} and built.no_stop_trim and built.max_new_tokens == 4


def test_generate_sync_and_release_on_a_gpu(tiny_model_dir, tokenizer):
    pytest.importorskip("sglang", reason=SKIP_REASON)
    if not torch.cuda.is_available():
        pytest.skip("the sglang engine needs a CUDA GPU")
    engine = SGLangEngine.from_pretrained(tiny_model_dir, dtype="float32", device="cuda:0", memory_fraction=0.3)
    try:
        items = make_items(["12+34=", "5+6="], tokenizer)
        settings = generate_settings(n=2, max_new_tokens=5, keep_log_probs=True, temperature=0.0)
        before = generate_rollout(engine, items, settings, seed=1)
        assert before.responses.shape == (4, 5) and torch.equal(before.responses[0], before.responses[1])
        assert bool((before.sample_log_probs <= 0).all()) and not math.isnan(float(before.sample_log_probs.sum()))
        engine.release_memory()
        from transformers import AutoModelForCausalLM

        weights = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
        engine.load_weights(list(weights.items()))  # the same weights: the samples must not change
        engine.resume_memory()
        after = generate_rollout(engine, items, settings, seed=1)
        assert torch.equal(after.responses, before.responses)
    finally:
        engine.shutdown()
