"""Weight sync to a rollout on its own pool: the actor's rank 0 streams its weights in buckets over a collective
group of their own (rlgraph/runtime/weight_sync.py, rlgraph/workers/weight_sync.py), and no state dict
goes through Ray's object store."""

from __future__ import annotations

import dataclasses
import sys
import threading

import pytest
import ray
import torch

from rlgraph.runtime.process import DeviceProcess
from rlgraph.workers import weight_sync as ws

from .helpers import Started, read_metrics
from .plans import ACTOR, grpo_plan

# --- buckets, no Ray ---


def _tiny_module() -> torch.nn.Module:
    """Tied weights, two dtypes, a persistent buffer and a tensor larger than the cap the tests use."""
    torch.manual_seed(0)
    module = torch.nn.Module()
    module.embed = torch.nn.Embedding(64, 16)  # 4 KiB
    module.head = torch.nn.Linear(16, 64, bias=False)
    module.head.weight = module.embed.weight  # tied, as arith-gpt's are
    module.norm = torch.nn.LayerNorm(16).to(torch.bfloat16)
    module.proj = torch.nn.Linear(16, 16)
    module.register_buffer("scale", torch.arange(3.0))
    return module


def test_buckets_hold_one_dtype_within_the_cap_and_round_trip():
    module = _tiny_module()
    state = module.state_dict()
    cap = 1024
    buckets = ws.plan_buckets(((n, tuple(t.shape), t.dtype) for n, t in state.items()), cap)
    names = [n for b in buckets for n in b.names]
    assert sorted(names) == sorted(state)  # every tensor exactly once
    for bucket in buckets:
        assert all(state[n].dtype == bucket.dtype for n in bucket.names)
        assert bucket.nbytes <= cap or len(bucket.names) == 1  # only a tensor larger than the cap exceeds it
    assert len(buckets) > 2  # the cap split the float32 tensors, and bfloat16 has buckets of its own
    for bucket in buckets:
        flat = ws.pack(bucket, (state[n] for n in bucket.names))
        assert flat.dim() == 1 and flat.numel() * flat.element_size() == bucket.nbytes
        for name, tensor in ws.unpack(bucket, flat):
            assert tensor.dtype == state[name].dtype and torch.equal(tensor, state[name])


def test_a_cap_below_one_byte_is_refused():
    with pytest.raises(ValueError, match="cap must be positive"):
        ws.plan_buckets([("w", (2,), torch.float32)], 0)


def test_send_and_receive_over_a_gloo_group_of_their_own():
    """Rank 0 streams a module to rank 1 over a real gloo pair (two threads), with a small cap: rank 1's
    module ends equal, loaded bucket by bucket, none larger than the cap unless one tensor is."""
    sender, receiver = _tiny_module(), _tiny_module()
    with torch.no_grad():
        for p in receiver.parameters():
            p.zero_()
    store = ws.open_store("127.0.0.1", 2, 30)
    loaded: list[list[str]] = []
    sizes: list[int] = []
    results: dict[int, object] = {}

    def load(pairs):
        loaded.append([n for n, _ in pairs])
        sizes.append(sum(t.numel() * t.element_size() for _, t in pairs))
        receiver.load_state_dict(dict(pairs), strict=False)

    def rank(r: int) -> None:
        try:
            group = ws.open_group("127.0.0.1", store.port, r, 2, "gloo", rendezvous_timeout_s=30,
                                  collective_timeout_s=30, store=store if r == 0 else None)
            transfer = ws.broadcaster(group)
            results[r] = (ws.send_weights(sender, transfer, cap=1024) if r == 0 else ws.receive_weights(transfer, load))
        except BaseException as err:  # surfaced below
            results[r] = err

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(isinstance(v, BaseException) for v in results.values()), results
    assert results[0] == results[1] > 0  # bytes sent = bytes received
    assert "head.weight" not in sum(loaded, [])  # a tied weight travels once...
    for name, value in receiver.state_dict().items():  # ...and the receiver, tied the same way, has it all
        assert torch.equal(value, sender.state_dict()[name]), name
    assert len(loaded) > 2 and all(size <= 1024 or len(names) == 1 for size, names in zip(sizes, loaded))


def test_a_bf16_rollout_gets_its_parameters_in_bf16_over_gloo_half_the_bytes_and_exactly_its_cast():
    """fp32 master weights into a bf16 rollout: every parameter bucket on the wire is bf16 (half the bytes
    of the fp32 stream), the float32 buffer travels as it is, and the receiving bf16 module ends equal to
    the trainer's weights cast to bf16, as loading the fp32 stream would have rounded them."""
    sender = _tiny_module()
    receiver = _tiny_module().to(torch.bfloat16)
    with torch.no_grad():
        for p in receiver.parameters():
            p.zero_()
    store = ws.open_store("127.0.0.1", 2, 30)
    dtypes_seen: dict[str, torch.dtype] = {}
    results: dict[int, object] = {}

    def load(pairs):
        dtypes_seen.update((n, t.dtype) for n, t in pairs)
        receiver.load_state_dict(dict(pairs), strict=False)

    def rank(r: int) -> None:
        try:
            group = ws.open_group("127.0.0.1", store.port, r, 2, "gloo", rendezvous_timeout_s=30,
                                  collective_timeout_s=30, store=store if r == 0 else None)
            transfer = ws.broadcaster(group)
            results[r] = (ws.send_weights(sender, transfer, cap=1024, dtype="bfloat16") if r == 0
                          else ws.receive_weights(transfer, load))
        except BaseException as err:  # surfaced below
            results[r] = err

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(isinstance(v, BaseException) for v in results.values()), results
    parameters = {n for n, _ in sender.named_parameters()}
    assert {n: d for n, d in dtypes_seen.items() if n in parameters} == dict.fromkeys(parameters, torch.bfloat16)
    assert dtypes_seen["scale"] == torch.float32  # a buffer as it is
    full_precision = ws.send_weights(sender, lambda t: None, cap=1024)
    buffer_bytes = sender.scale.numel() * 4
    bf16_norm = sum(p.numel() * 2 for p in sender.norm.parameters())  # already bf16: the same either way
    assert results[0] == results[1] == (full_precision - buffer_bytes - bf16_norm) // 2 + buffer_bytes + bf16_norm
    cast = {n: t.to(torch.bfloat16) if n in parameters else t for n, t in sender.state_dict().items()}
    for name, value in receiver.state_dict().items():
        assert torch.equal(value, cast[name].to(value.dtype)), name


def test_a_float32_rollout_gets_the_weights_as_they_are_bit_for_bit():
    """Nothing is widened: the bf16 norm travels in bf16 (the engine widens it exactly on loading)."""
    sender = _tiny_module()
    replay = _wire_of(sender, cap=1024, dtype="float32")
    received: dict[str, torch.Tensor] = {}
    ws.receive_weights(replay, lambda pairs: received.update((n, t.clone()) for n, t in pairs))
    for name, tensor in received.items():
        assert tensor.dtype == sender.state_dict()[name].dtype and torch.equal(tensor, sender.state_dict()[name])


def _wire_of(module: torch.nn.Module, cap: int, dtype: str | None = None):
    """What send_weights puts on the wire for `module`, as a receive that replays it."""
    from collections import deque

    wire: deque = deque()
    ws.send_weights(module, lambda t: wire.append(t.clone()), cap=cap, dtype=dtype)
    return lambda t: t.copy_(wire.popleft())


@pytest.mark.parametrize("keep_buckets", [True, False])
def test_buckets_an_engine_reads_later_stay_allocated_until_the_update_ends(keep_buckets):
    """SGLang's load answers before its copies run and holds no reference to the tensors: a bucket freed
    after its load may be handed to the next one while the copies wait. With keep_buckets every bucket's
    buffer is alive (and distinct) until the last is loaded, then freed."""
    import weakref

    sender = _tiny_module()
    buffers: list[weakref.ref] = []
    received: list[torch.Tensor] = []  # what each bucket held when it was loaded
    alive_at_each_load: list[int] = []

    def load_later(pairs):  # keeps only what an IPC handle would: no reference
        buffers.append(weakref.ref(pairs[0][1]._base))
        received.append(pairs[0][1]._base.clone())
        alive = [(ref(), then) for ref, then in zip(buffers, received) if ref() is not None]
        alive_at_each_load.append(len(alive))
        if keep_buckets:  # the copies still queued read what arrived: no later bucket wrote over it
            assert all(torch.equal(now, then) for now, then in alive)
            assert len({now.data_ptr() for now, _ in alive}) == len(alive)

    ws.receive_weights(_wire_of(sender, cap=1024), load_later, keep_buckets=keep_buckets)
    assert len(buffers) > 2
    if keep_buckets:
        assert alive_at_each_load == list(range(1, len(buffers) + 1))
    else:  # without it each bucket is gone before the next arrives: the race on a GPU
        assert alive_at_each_load == [1] * len(buffers)
    assert all(ref() is None for ref in buffers)  # nothing outlives the update


# --- to an engine in the source's own process (path in_process), no Ray ---


class RecordingEngine:
    """Keeps only what an IPC handle would, the memory the tensors live in and no reference to it, and checks
    that memory only when the update ends, as SGLang's queued copies read it after its load has answered."""

    def __init__(self) -> None:
        import weakref

        self.weakref = weakref.ref
        self.loads: list[dict[str, torch.Tensor]] = []  # what each load was handed (copies, for the checks)
        self.memory: list[tuple[object, torch.Tensor]] = []  # (weak ref to a load's buffer, what it held then)

    def load(self, pairs):
        self.loads.append({name: t.clone() for name, t in pairs})
        buffer = pairs[0][1]._base if pairs[0][1]._base is not None else pairs[0][1]
        assert all(t.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr() for _, t in pairs)
        self.memory.append((self.weakref(buffer), buffer.clone()))

    def alive(self) -> bool:
        return all(ref() is not None for ref, _ in self.memory)

    def unchanged(self) -> bool:
        return all(ref() is not None and torch.equal(ref(), then) for ref, then in self.memory)


def test_an_in_process_sync_hands_a_bf16_engine_its_cast_weights_in_buckets_of_half_the_bytes():
    sender = _tiny_module()
    engine = RecordingEngine()
    loaded = ws.load_in_process(sender, engine.load, cap=1024, dtype="bfloat16", keep_buckets=True)
    parameters = {n for n, _ in sender.named_parameters()}
    received = {name: tensor for load in engine.loads for name, tensor in load.items()}
    assert set(received) == set(sender.state_dict()) - {"head.weight"}  # a tied weight once
    assert {n: t.dtype for n, t in received.items() if n in parameters} == dict.fromkeys(parameters - {"head.weight"},
                                                                                         torch.bfloat16)
    for name, tensor in received.items():
        expected = sender.state_dict()[name]
        assert torch.equal(tensor, expected.to(torch.bfloat16) if name in parameters else expected), name
    sizes = [sum(t.numel() * t.element_size() for t in load.values()) for load in engine.loads]
    assert len(sizes) > 2 and all(size <= 1024 or len(load) == 1 for size, load in zip(sizes, engine.loads))
    full_precision = ws.load_in_process(sender, lambda pairs: None, cap=1024)
    buffer_bytes, bf16_norm = sender.scale.numel() * 4, sum(p.numel() * 2 for p in sender.norm.parameters())
    assert loaded == (full_precision - buffer_bytes - bf16_norm) // 2 + buffer_bytes + bf16_norm


@pytest.mark.parametrize("keep_buckets", [True, False])
def test_an_in_process_sync_keeps_the_buckets_an_engine_reads_later_alive_and_unmodified_until_it_ends(keep_buckets):
    """Checked when the update ends, not at each load: with keep_buckets every tensor handed to the engine is
    still allocated then and holds what it held when handed over; without it the buffers are gone."""
    seen_at_end: dict[str, bool] = {}
    engine = RecordingEngine()

    def load(pairs):
        engine.load(pairs)
        if len(engine.loads) == 4:  # the last bucket of this module at this cap: the update's end, seen from inside
            seen_at_end.update(alive=engine.alive(), unchanged=engine.unchanged())

    ws.load_in_process(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)), load, cap=64,
                       keep_buckets=keep_buckets)
    assert len(engine.loads) == 4
    assert seen_at_end == {"alive": keep_buckets, "unchanged": keep_buckets}
    assert all(ref() is None for ref, _ in engine.memory)  # nothing outlives the update


# --- which path a plan's sync takes ---


def _colocated_own_copy(plan, rollout_replicas: int | None = None, strategy: str = "ddp"):
    """`plan` (colocated) with a rollout that holds weights of its own (engine vllm), optionally fewer replicas
    than the actor (each in an actor process), and the actor's strategy."""
    roles = []
    for r in plan.roles:
        if r.name == "rollout":
            r = dataclasses.replace(r, settings=dataclasses.replace(r.settings, engine="vllm"),
                                    replicas=rollout_replicas or r.replicas)
        if r.name == "actor":
            r = dataclasses.replace(r, settings=dataclasses.replace(ACTOR, strategy=strategy))
        roles.append(r)
    plan.roles = roles
    if rollout_replicas is not None:
        plan.placements = [p for p in plan.placements if p.role != "rollout" or p.replica < rollout_replicas]
    return plan


def _path(plan):
    from rlgraph.runtime.roles import worker_specs
    from rlgraph.runtime.weight_sync import collective_edges, in_process_edges, sync_path

    specs = worker_specs(plan, {r.name: "builtin:arith-gpt" for r in plan.roles})
    return sync_path(plan, specs, "actor", "rollout"), collective_edges(plan, specs), in_process_edges(plan, specs)


def test_the_sync_path_a_plan_takes():
    from rlgraph.plan.model import Placement

    assert _path(grpo_plan(actor_replicas=2))[0] == "alias"  # engine hf colocated: the actor's module in place
    path, collective, in_process = _path(grpo_plan(rollout_pool="gen", rollout_replicas=2))
    assert path == "collective" and [e.processes for e in collective] == [("actor/0", "rollout/0", "rollout/1")]
    assert in_process == []

    path, collective, in_process = _path(_colocated_own_copy(grpo_plan(actor_replicas=2)))
    assert path == "in_process" and collective == []
    assert [(e.gatherers, e.loaders) for e in in_process] == [((), ("actor/0", "actor/1"))]
    # a sharded actor with a rollout replica in one of its two processes: the other only gathers
    _, _, in_process = _path(_colocated_own_copy(grpo_plan(actor_replicas=2), rollout_replicas=1, strategy="fsdp"))
    assert [(e.gatherers, e.loaders, e.receivers) for e in in_process] == [(("actor/1",), ("actor/0",), 1)]
    # unsharded, every replica holds the whole model: the process without a rollout replica has nothing to do
    _, _, in_process = _path(_colocated_own_copy(grpo_plan(actor_replicas=2), rollout_replicas=1))
    assert [(e.gatherers, e.loaders) for e in in_process] == [((), ("actor/0",))]

    mixed = _colocated_own_copy(grpo_plan(actor_replicas=1))  # one replica beside the actor, one on a pool of its own
    mixed.pools.append(dataclasses.replace(mixed.pools[0], name="gen"))
    mixed.placements.append(Placement("rollout", 1, "gen", 0, 0, [0], "rollout/1"))
    mixed.roles = [dataclasses.replace(r, replicas=2) if r.name == "rollout" else r for r in mixed.roles]
    assert _path(mixed) == ("object_store", [], [])


def test_the_flagship_specs_colocated_sglang_rollout_gets_bf16_buckets_in_its_process():
    """specs/ppo_qwen7b_rm_2x8.rl (fsdp actor x 8, SGLang tp = 2 colocated): no object store and no /dev/shm; the
    four processes that host a rollout replica load, the other four only gather their shards; bf16 on the way."""
    from .helpers import REPO, plan_from_spec

    plan = plan_from_spec(REPO / "specs" / "ppo_qwen7b_rm_2x8.rl")
    path, collective, in_process = _path(plan)
    assert path == "in_process" and collective == []
    assert [(e.gatherers, e.loaders, e.dtype) for e in in_process] == [
        (("actor/1", "actor/3", "actor/5", "actor/7"), ("actor/0", "actor/2", "actor/4", "actor/6"), "bfloat16")]


# --- an own-pool sync straight into the engine's own processes (SGLang's schedulers) ---


class FakeHandle:
    """A process handle whose calls are recorded (method, args) and answered from `answers` (put into Ray)."""

    def __init__(self, name: str, log: list, answers: dict | None = None) -> None:
        self.name, self.log, self.answers = name, log, answers or {}

    def __getattr__(self, method):
        handle = self

        class Method:
            @staticmethod
            def remote(*args, **kwargs):
                handle.log.append((handle.name, method, args))
                return ray.put(handle.answers[method]) if method in handle.answers else f"{handle.name}.{method}"

        return Method


def _gpu_sglang_plan(replicas: int = 2):
    plan = grpo_plan(rollout_pool="gen", rollout_replicas=replicas)
    plan.pools = [dataclasses.replace(p, device="gpu") for p in plan.pools]
    plan.roles = [dataclasses.replace(r, settings=dataclasses.replace(r.settings, engine="sglang", dtype="bfloat16"))
                  if r.name == "rollout" else r for r in plan.roles]
    return plan


def test_an_own_pool_sglang_sync_goes_into_its_schedulers_where_every_engine_can(ray_session):
    from types import SimpleNamespace

    from rlgraph.runtime.roles import worker_specs
    from rlgraph.runtime.weight_sync import collective_edges, into_engine_processes

    plan = _gpu_sglang_plan()
    (edge,) = collective_edges(plan, worker_specs(plan, {r.name: "builtin:arith-gpt" for r in plan.roles}))
    assert edge.backend == "nccl" and edge.world_size == 3

    def lowered(*answers):
        log: list = []
        processes = {"actor/0": FakeHandle("actor/0", log)}
        processes.update({f"rollout/{i}": FakeHandle(f"rollout/{i}", log, {"engine_group_receiver": a})
                          for i, a in enumerate(answers)})
        return SimpleNamespace(processes=processes)

    tp2 = {"ranks": 2, "as_bytes": True}
    into = into_engine_processes(plan, lowered(tp2, tp2), edge)
    assert (into.engine_ranks, into.world_size, into.as_bytes) == ((2, 2), 5, True)  # rank 0 + 2 x tp 2
    assert into_engine_processes(plan, lowered(tp2, None), edge) == edge  # one engine cannot: its processes receive
    typed = {"ranks": 2, "as_bytes": False}
    assert into_engine_processes(plan, lowered(tp2, typed), edge) == edge  # the engines disagree on the wire
    gloo = dataclasses.replace(edge, backend="gloo")
    assert into_engine_processes(plan, lowered(), gloo) == gloo  # not asked: SGLang's path is nccl only


def test_a_sync_into_the_engines_processes_sends_their_layout_before_the_buckets():
    from types import SimpleNamespace

    from rlgraph.runtime.group import Member
    from rlgraph.runtime.weight_sync import SyncEdge, start_sync

    log: list = []
    processes = {p: FakeHandle(p, log) for p in ("actor/0", "rollout/0", "rollout/1")}
    group = SimpleNamespace(members_for_one=lambda: [Member(processes["actor/0"], 0, "actor/0")])
    lowered = SimpleNamespace(processes=processes, groups={"actor": group})
    edge = SyncEdge("actor", "rollout", ("actor/0", "rollout/0", "rollout/1"), "nccl", "bfloat16",
                    engine_ranks=(1, 1))
    refs = start_sync(lowered, edge, bucket_bytes=64)
    assert [(name, method) for name, method, _ in log] == [
        ("actor/0", "weight_sync_layout"), ("actor/0", "send_weights"),
        ("rollout/0", "receive_weights_in_engine"), ("rollout/1", "receive_weights_in_engine")]
    assert log[0][2] == ("actor", 64, "bfloat16")
    assert all(args[2] == "actor/0.weight_sync_layout" for _, method, args in log[2:])  # each is handed the layout
    assert refs[-edge.receivers:] == ["rollout/0.receive_weights_in_engine", "rollout/1.receive_weights_in_engine"]


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="expected gloo or nccl"):
        ws.open_group("127.0.0.1", 1, 0, 1, "mpi", rendezvous_timeout_s=1, collective_timeout_s=1, store=object())


# --- on Ray: a rollout on a pool of its own ---

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers need not have tests/ on sys.path


class ProbeProcess(DeviceProcess):
    """Records the role calls it serves, and shows and nudges the weights of its workers."""

    def call(self, role, method, *args, **kwargs):
        self.__dict__.setdefault("seen", []).append(f"{role}.{method}")
        return super().call(role, method, *args, **kwargs)

    def seen_calls(self) -> list[str]:
        return self.__dict__.pop("seen", [])

    def weights(self, role: str) -> dict[str, torch.Tensor]:
        """The rollout engine's weights, or this rank's part of a (possibly sharded) policy's."""
        from rlgraph.workers import RolloutWorker

        worker = self.workers[role]
        module = worker.engine.module if isinstance(worker, RolloutWorker) else worker.module
        return {n: (t.to_local() if hasattr(t, "to_local") else t).detach().clone() for n, t in
                module.state_dict().items()}

    def nudge(self, role: str, seed: int) -> None:
        """Add noise to each parameter this rank holds (its shard, when sharded): the weights a sync must move."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for p in self.workers[role].module.parameters():
                local = p.to_local() if hasattr(p, "to_local") else p
                local.add_(torch.randn(local.shape, generator=g, dtype=local.dtype) * 0.01)


def _sync(started: Started):
    from rlgraph.runtime.versions import PolicyVersions
    from rlgraph.runtime.weights import WeightSync

    return WeightSync(started.plan, started.lowered, started.specs, PolicyVersions())


def _full_actor(started: Started) -> dict[str, torch.Tensor]:
    """The actor's whole weights: rank 0's, or every rank's shards gathered (dispatch `one` on a sharded group)."""
    return ray.get(started.lowered.groups["actor"].one("state_dict").result())


def _rollout_weights(started: Started) -> list[dict[str, torch.Tensor]]:
    return [ray.get(m.handle.weights.remote("rollout")) for m in started.lowered.groups["rollout"].members]


def _seen(started: Started) -> list[str]:
    return [c for h in started.lowered.processes.values() for c in ray.get(h.seen_calls.remote())]


def _assert_equal(rollout: dict[str, torch.Tensor], actor: dict[str, torch.Tensor]) -> None:
    assert rollout.keys() == actor.keys()
    different = [k for k in actor if not torch.equal(rollout[k], actor[k])]
    assert not different, different[:5]


def test_rollout_replicas_get_the_actors_weights_exactly_without_the_object_store(ray_session, arith_model):
    from rlgraph.runtime.weight_sync import start_sync

    plan = grpo_plan(rollout_pool="gen", rollout_replicas=2)
    with Started(plan, process_class=ProbeProcess) as started:
        edge = started.lowered.sync_edges[("actor", "rollout")]
        assert edge.backend == "gloo" and edge.processes == ("actor/0", "rollout/0", "rollout/1")
        sync = _sync(started)
        ray.get(started.lowered.process_of("actor").nudge.remote("actor", 1))
        actor = _full_actor(started)
        assert all(any(not torch.equal(w[k], actor[k]) for k in actor) for w in _rollout_weights(started))
        _seen(started)

        seconds = sync.sync()
        assert seconds > 0 and _seen(started) == []  # no state_dict / load_state_dict call: no object in the store
        for weights in _rollout_weights(started):
            _assert_equal(weights, actor)
        assert sync.sync() == 0.0  # in sync until the next step's update

        # --- again, with buckets of 64 KiB: many buckets, same result
        ray.get(started.lowered.process_of("actor").nudge.remote("actor", 2))
        actor = _full_actor(started)
        _seen(started)
        ray.get(start_sync(started.lowered, edge, bucket_bytes=64 * 1024))
        assert _seen(started) == []
        for weights in _rollout_weights(started):
            _assert_equal(weights, actor)


def test_a_bf16_rollout_on_its_own_pool_gets_the_actors_cast_weights_in_half_the_bytes(ray_session, arith_model):
    """An fp32-master actor syncing into a bf16 rollout: the edge carries the rollout's dtype, the sender puts
    half the fp32 bytes on the gloo group, and the engine holds exactly the actor's weights cast to bf16."""
    from rlgraph.runtime.weight_sync import start_sync

    plan = grpo_plan(rollout_pool="gen")
    plan.roles = [dataclasses.replace(r, settings=dataclasses.replace(r.settings, dtype="bfloat16"))
                  if r.name == "rollout" else r for r in plan.roles]
    with Started(plan, process_class=ProbeProcess) as started:
        edge = started.lowered.sync_edges[("actor", "rollout")]
        assert (edge.backend, edge.dtype) == ("gloo", "bfloat16")
        ray.get(started.lowered.process_of("actor").nudge.remote("actor", 3))
        actor = _full_actor(started)
        sent_fp32, _ = ray.get(start_sync(started.lowered, dataclasses.replace(edge, dtype="float32")))
        sent, _ = ray.get(start_sync(started.lowered, edge))
        assert sent_fp32 == 2 * sent  # arith-gpt has parameters only, all fp32 masters
        rollout = _rollout_weights(started)[0]
        assert {t.dtype for t in rollout.values()} == {torch.bfloat16}
        _assert_equal(rollout, {k: t.to(torch.bfloat16) for k, t in actor.items()})


def test_a_sharded_actor_gathers_on_every_rank_and_rank_0_sends(ray_session, arith_model):
    """strategy = fsdp over 2 replicas: each parameter is gathered by both ranks, rank 0 streams it."""
    plan = grpo_plan(actor_replicas=2, rollout_pool="gen")
    plan.roles = [dataclasses.replace(r, settings=dataclasses.replace(ACTOR, strategy="fsdp")) if r.name == "actor"
                  else r for r in plan.roles]
    with Started(plan, process_class=ProbeProcess) as started:
        assert started.lowered.groups["actor"].sharded
        assert started.lowered.sync_edges[("actor", "rollout")].processes == ("actor/0", "rollout/0")
        for i, member in enumerate(started.lowered.groups["actor"].members):  # each rank nudges its own shard
            ray.get(member.handle.nudge.remote("actor", 10 + i))
        actor = _full_actor(started)
        _seen(started)
        _sync(started).sync()
        assert _seen(started) == []
        _assert_equal(_rollout_weights(started)[0], actor)


class OwnCopyProcess(ProbeProcess):
    """Builds a colocated `engine = vllm` rollout with the hf engine instead: a RolloutWorker with weights of its
    own in the actor's process, as a vllm or sglang rollout is, without starting vLLM."""

    def _build(self, spec):
        if spec.worker == "rollout" and spec.settings.engine == "vllm":
            spec = dataclasses.replace(spec, settings=dataclasses.replace(spec.settings, engine="hf"))
        return super()._build(spec)


@pytest.mark.parametrize("sharded", [False, True])
def test_a_colocated_rollout_with_its_own_copy_gets_the_cast_weights_in_its_process(ray_session, arith_model,
                                                                                     sharded):
    """Path in_process: no state_dict / load_state_dict call (nothing through the object store) and no group; the
    bf16 rollout holds exactly the actor's weights cast to bf16. Sharded over 2 processes with the rollout in
    one, the other takes part in the gathers only."""
    plan = _colocated_own_copy(grpo_plan(actor_replicas=2), rollout_replicas=1, strategy="fsdp" if sharded else "ddp")
    plan.roles = [dataclasses.replace(r, settings=dataclasses.replace(r.settings, dtype="bfloat16"))
                  if r.name == "rollout" else r for r in plan.roles]
    with Started(plan, process_class=OwnCopyProcess) as started:
        from rlgraph.runtime.weight_sync import InProcessEdge

        edge = started.lowered.sync_edges[("actor", "rollout")]
        assert isinstance(edge, InProcessEdge) and edge.loaders == ("actor/0",)
        assert edge.gatherers == (("actor/1",) if sharded else ())
        for i, member in enumerate(started.lowered.groups["actor"].members):  # each rank nudges its own shard
            ray.get(member.handle.nudge.remote("actor", 20 + i))
        actor = _full_actor(started)
        assert any(not torch.equal(_rollout_weights(started)[0][k], actor[k].to(torch.bfloat16)) for k in actor)
        _seen(started)
        assert _sync(started).sync() > 0
        assert _seen(started) == []
        _assert_equal(_rollout_weights(started)[0], {k: t.to(torch.bfloat16) for k, t in actor.items()})


def test_a_run_with_its_rollout_on_its_own_pool_resumes_bit_identical(ray_session, arith_model, tmp_path):
    """Stopped after step 2 and resumed, the run ends where one that never stopped does: the resumed rollout
    starts from the model's folder and the first sync hands it the checkpoint's actor."""
    from safetensors.torch import load_file

    from rlgraph.runtime import run_plan

    def plan(steps: int):
        p = grpo_plan(rollout_pool="gen", steps=steps)
        p.train = dataclasses.replace(p.train, checkpoint_every=2)
        return p

    run_plan(plan(3), tmp_path / "full")
    run_plan(plan(2), tmp_path / "part")
    run_plan(plan(3), tmp_path / "part")
    records = read_metrics(tmp_path / "part")
    assert [r["training/global_step"] for r in records] == [0, 1, 2, 3]
    assert records[3]["timing_s/sync"] > 0  # the resumed run's first step moved the weights
    full, part = (load_file(tmp_path / run / "checkpoints" / "step_3" / "actor" / "model.safetensors")
                  for run in ("full", "part"))
    _assert_equal(part, full)
