"""rlgraph/compiler/passes/batch.py: prompts × n samples split evenly over replicas, mini- and micro-batches."""

from .helpers import GRPO_STEP, compile_text, found, line_of, only, spec


def roles(replicas: int = 4, n: int = 4, actor: str = "", rollout: str = "") -> str:
    return (f"role actor {{ model = policy  pool = main  replicas = {replicas}  {actor} }}\n"
            f"role rollout {{ colocate = actor  n = {n}  {rollout} }}")


def separate(actor_replicas: int, rollout_replicas: int, n: int = 4) -> str:
    return (f"role actor {{ model = policy  pool = main  replicas = {actor_replicas} }}\n"
            f"role rollout {{ model = policy  pool = gen  replicas = {rollout_replicas}  n = {n} }}\n"
            "role ref { model = policy  colocate = actor }")


GEN = "pool gen { nodes = 1  devices_per_node = 4 }"
SYNCED_REF_STEP = ("  sync actor -> rollout\n" + GRPO_STEP.replace(
    "  scores ->", "  responses -> ref.log_prob -> ref_log_prob\n  scores ->").replace(
    "old_log_prob, advantages ->", "old_log_prob, advantages, ref_log_prob ->").replace(
    "actor.update", "actor.update(kl_coef = 0.001)"))


def test_samples_split_over_the_training_replicas(tmp_path):
    text = spec(SYNCED_REF_STEP, separate(3, 2), extra=GEN)
    result = compile_text(tmp_path, text)
    assert found(result) == [("batch-divisibility", line_of(text, "batch_size"))]
    d = only(result, "batch-divisibility")
    assert d.message == ("32 prompts × n=4 = 128 samples per step do not split evenly over the 3 data-parallel "
                         "replicas of `actor` and `ref`")
    assert d.hints == ("use a batch_size that is a multiple of 3 (e.g. 30 or 33), or replicas = 2 or 4 on `actor`",)
    assert d.label == "128 samples / 3 replicas"
    assert (d.span.end_column - d.span.column) == 2  # the `32`


def test_n_counts_towards_the_samples(tmp_path):
    # 30 prompts do not split over 4 replicas, but 30 × n=2 = 60 samples do; the rollout has 2 replicas
    text = spec(SYNCED_REF_STEP, separate(4, 2, n=2), data="batch_size = 30", extra=GEN)
    assert found(compile_text(tmp_path, text)) == []


def test_only_the_factor_of_the_replicas_that_n_lacks_is_asked_of_the_batch(tmp_path):
    text = spec(SYNCED_REF_STEP, separate(6, 1, n=2), data="batch_size = 31", extra=GEN)
    d = only(compile_text(tmp_path, text), "batch-divisibility")
    assert d.hints[0].startswith("use a batch_size that is a multiple of 3 (e.g. 30 or 33)")


def test_generation_spreads_the_prompts(tmp_path):
    text = spec(GRPO_STEP, roles(replicas=4, n=2), data="batch_size = 30")
    result = compile_text(tmp_path, text)
    assert found(result) == [("batch-divisibility", line_of(text, "batch_size"))]
    d = only(result, "batch-divisibility")
    assert d.message == "30 prompts per step do not split evenly over the 4 data-parallel replicas of `rollout`"
    assert d.hints[0].endswith("use a batch_size that is a multiple of 4 (e.g. 28 or 32), "
                               "or replicas = 3 or 5 on `actor`")


def test_a_tensor_parallel_rollout_has_fewer_replicas(tmp_path):
    # 4 devices of the actor hold 2 rollout replicas of tp = 2: 6 prompts split over 2, 24 samples over 4
    text = spec(GRPO_STEP, roles(replicas=4, n=4, rollout="tp = 2"), data="batch_size = 6")
    # the batch arithmetic holds; only rlgraph's own runtime (hf: tp = 1) cannot run it
    assert found(compile_text(tmp_path, text)) == [("tp-not-implemented", line_of(text, "tp = 2"))]


def test_minibatch_larger_than_the_batch(tmp_path):
    text = spec(GRPO_STEP.replace("actor.update", "actor.update(minibatch = 64)"), roles())
    result = compile_text(tmp_path, text)
    assert found(result) == [("batch-divisibility", line_of(text, "minibatch"))]
    d = only(result, "batch-divisibility")
    assert d.message == "a mini-batch of 64 prompts is more than the 32 prompts of a step"
    assert d.hints == ("`minibatch` counts prompts, like verl's ppo_mini_batch_size: use one that divides 32, "
                       "e.g. 16 or 32",)


def test_minibatch_must_divide_the_batch(tmp_path):
    text = spec(GRPO_STEP.replace("actor.update", "actor.update(minibatch = 12)"), roles())
    d = only(compile_text(tmp_path, text), "batch-divisibility")
    assert d.span.line == line_of(text, "minibatch")
    assert d.message == ("the 32 prompts of a step (128 samples) do not split into mini-batches of 12 prompts "
                         "(48 samples)")
    assert d.hints[0].endswith("use one that divides 32, e.g. 8 or 16")


def test_minibatch_samples_split_over_the_replicas(tmp_path):
    text = spec(GRPO_STEP.replace("actor.update", "actor.update(minibatch = 2)"), roles(replicas=4, n=1),
                data="batch_size = 32")
    d = only(compile_text(tmp_path, text), "batch-divisibility")
    assert d.span.line == line_of(text, "minibatch")
    assert d.message == ("a mini-batch of 2 prompts × n=1 = 2 samples does not split evenly over the 4 "
                         "data-parallel replicas of `actor`")
    assert d.hints == ("use a minibatch that divides 32 and gives a multiple of 4 samples, e.g. 4, "
                       "or replicas = 2 on `actor`",)


def test_minibatch_hint_offers_replicas_when_no_minibatch_fits(tmp_path):
    # 6 prompts × n=1 over 4 replicas: the batch itself does not split (one error, at batch_size, not two)
    plain = GRPO_STEP.replace("grpo_advantage", "reinforce_pp_advantage")  # no groups: n = 1 is fine
    text = spec(plain.replace("actor.update", "actor.update(minibatch = 3)"), roles(replicas=4, n=1),
                data="batch_size = 6")
    assert found(compile_text(tmp_path, text)) == [("batch-divisibility", line_of(text, "batch_size"))]
    # 8 prompts × n=1 split over 4 replicas, a mini-batch of 2 does not: 4 prompts would, or 2 replicas
    text = spec(plain.replace("actor.update", "actor.update(minibatch = 2)"), roles(replicas=4, n=1),
                data="batch_size = 8")
    d = only(compile_text(tmp_path, text), "batch-divisibility")
    assert d.hints == ("use a minibatch that divides 8 and gives a multiple of 4 samples, e.g. 4, "
                       "or replicas = 2 on `actor`",)


def test_minibatch_in_prompts_is_multiplied_by_n(tmp_path):
    text = spec(GRPO_STEP.replace("actor.update", "actor.update(minibatch = 2)"), roles(replicas=4, n=2))
    assert found(compile_text(tmp_path, text)) == []


def test_micro_batch_must_divide_the_per_device_mini_batch(tmp_path):
    text = spec(GRPO_STEP.replace("actor.update", "actor.update(minibatch = 8)"),
                roles(replicas=2, n=4, actor="micro_batch = 12"))
    result = compile_text(tmp_path, text)
    assert found(result) == [("batch-divisibility", line_of(text, "micro_batch"))]
    d = only(result, "batch-divisibility")
    assert d.message == ("micro_batch = 12 samples does not divide the 16 samples each replica of `actor` gets per "
                         "mini-batch (8 prompts × n=4 over 2 replicas)")
    assert d.hints[0].endswith("use a divisor of 16, e.g. 8 or 16")


def test_micro_batch_larger_than_the_per_device_mini_batch(tmp_path):
    text = spec(GRPO_STEP, roles(replicas=4, n=1, actor="micro_batch = 16"))
    d = only(compile_text(tmp_path, text), "batch-divisibility")
    assert d.message.startswith("micro_batch = 16 samples is more than the 8 samples each replica of `actor` gets")
    assert d.hints[0].endswith("use a divisor of 8, e.g. 4 or 8")


def test_micro_batch_that_divides_is_fine(tmp_path):
    text = spec(GRPO_STEP.replace("actor.update", "actor.update(minibatch = 8)"),
                roles(replicas=2, n=4, actor="micro_batch = 4"))
    assert found(compile_text(tmp_path, text)) == []


def test_no_data_block_means_no_batch_check(tmp_path):
    text = spec(GRPO_STEP, roles(replicas=3), data=None)
    assert [c for c, _ in found(compile_text(tmp_path, text))] == ["missing-block"]
