"""Plans built by hand, for tests that must not depend on the compiler's choices."""

from __future__ import annotations

from rlgraph.contract import settings as s
from rlgraph.plan.model import CallPlan, Placement, Plan, PoolPlan, RolePlan, Stage

ROLLOUT = s.RolloutSettings(engine="hf", n=2, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4, tp=1,
                            memory_fraction=0.5, max_sequences=None, dtype="float32", val=s.ValSettings(n=1, temperature=0.0, top_p=1.0, top_k=0))
OPTIM = s.OptimSettings(lr=1e-4, betas=(0.9, 0.999), weight_decay=0.0, warmup_steps=0, warmup_ratio=None, grad_clip=1.0,
                        schedule="constant", min_lr_ratio=0.0, decay_steps=None)
ACTOR = s.ActorSettings(dtype="float32", strategy="ddp", micro_batch=None, micro_batch_tokens=None, entropy_coeff=0.0,
                        optim=OPTIM, gradient_checkpointing=False, lora=None, param_offload=False,
                        optimizer_offload=False, remove_padding=False)
REF = s.RefSettings(dtype="float32", strategy="ddp", micro_batch=None, micro_batch_tokens=None, param_offload=False,
                    remove_padding=False)
ACTOR_UPDATE = s.ActorUpdateSettings(epochs=1, minibatch=None, mini_batch_size=None, micro_batch=None,
                                     micro_batch_tokens=None,
                                     loss_agg="token-mean", clip_low=0.2, clip_high=0.2, clip_c=3.0, kl_coef=0.001,
                                     kl_kind="low_var_kl", policy_loss="vanilla", entropy_coeff=0.0, temperature=1.0,
                                     tis="off", tis_cap=2.0, user_loss=None)


def grpo_plan(*, actor_replicas: int = 1, rollout_pool: str | None = None, rollout_replicas: int = 1,
              model_path: str = "builtin:arith-gpt", steps: int = 2, reward: str = "rlgraph.tasks.arith:exact_match",
              batch_size: int = 8) -> Plan:
    """GRPO: actor (`actor_replicas` devices and replicas) with ref colocated; the rollout colocated too
    (hybrid), or on a pool of its own with `rollout_replicas` devices and replicas."""
    k = actor_replicas
    pools = [PoolPlan("main", 1, k, "cpu", None)]
    placements = [Placement(role, i, "main", 0, i, [i], f"actor/{i}") for role in ("actor", "ref") for i in range(k)]
    if rollout_pool:
        pools.append(PoolPlan(rollout_pool, 1, rollout_replicas, "cpu", None))
        placements += [Placement("rollout", i, rollout_pool, 0, i, [i], f"rollout/{i}") for i in range(rollout_replicas)]
    else:
        rollout_replicas = k
        placements += [Placement("rollout", i, "main", 0, i, [i], f"actor/{i}") for i in range(k)]
    roles = [
        RolePlan("actor", "actor", "policy", model_path, "main", k, 1, None, ACTOR),
        RolePlan("rollout", "rollout", "policy", model_path, rollout_pool, rollout_replicas, 1,
                 None if rollout_pool else "actor", ROLLOUT),
        RolePlan("ref", "ref", "policy", model_path, None, k, 1, "actor", REF),
    ]
    calls = [
        CallPlan("rollout.generate", "rollout.generate", "role", "rollout", "generate", "rollout",
                 [["prompts", "prompts"]], [["responses", "responses"]], 1,
                 s.GenerateSettings(n=2, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4, keep_log_probs=False,
                                    env=None)),
        CallPlan("exact", "exact", "reward", "exact", None, None, [["responses", "responses"]], [["scores", "scores"]], 2,
                 s.NoSettings()),
        CallPlan("actor.log_prob", "actor.log_prob", "role", "actor", "log_prob", "actor",
                 [["responses", "responses"]], [["log_prob", "old_log_prob"]], 2, s.LogProbSettings(1.0, None, None)),
        CallPlan("ref.log_prob", "ref.log_prob", "role", "ref", "log_prob", "ref",
                 [["responses", "responses"]], [["ref_log_prob", "ref_log_prob"]], 2, s.LogProbSettings(1.0, None, None)),
        CallPlan("grpo_advantage", "grpo_advantage", "transform", "grpo_advantage", None, None,
                 [["rewards", "scores"]], [["advantages", "advantages"]], 3,
                 s.GrpoSettings(epsilon=1e-6, norm_by_std=True)),
        CallPlan("actor.update", "actor.update", "role", "actor", "update", "actor",
                 [["old_log_prob", "old_log_prob"], ["advantages", "advantages"], ["ref_log_prob", "ref_log_prob"]], [], 4,
                 ACTOR_UPDATE),
    ]
    schedule = [
        Stage(1, ["rollout.generate"], False),
        Stage(2, ["exact", "actor.log_prob", "ref.log_prob"], True),
        Stage(3, ["grpo_advantage"], False),
        Stage(4, ["actor.update"], False),
    ]
    return Plan(
        spec="<test>", pools=pools, roles=roles, placements=placements, rewards={"exact": reward},
        reward_settings={"exact": s.RewardSettings(max_invalid_fraction=0.0, timeout_s=60.0, batched=False, workers=1,
                                                       url=None, rows_per_request=64, concurrency=8, retries=3,
                                                       backoff_s=0.5)},
        calls=calls, syncs=[["actor", "rollout"]], schedule=schedule,
        data=s.DataSettings(train=("builtin:arith/train",), val=("builtin:arith/val",), batch_size=batch_size,
                            max_prompt_length=64, shuffle=True, val_batch_size=256,
                            max_response_length=32),
        train=s.TrainSettings(steps=steps, epochs=None, seed=0, validate_every=0, checkpoint_every=0,
                              keep_checkpoints=2, deterministic=False, max_failures=0,
                              samples_every=0, staleness=0, loggers=("console",)),
        models={"policy": s.ModelSettings("policy", model_path, params=None, layers=None, hidden=None, heads=None,
                                          kv_heads=None, vocab=None, intermediate=None, head_dim=None, experts=None,
                                          experts_per_token=None, expert_intermediate=None,
                                          shared_expert_intermediate=None)},
    )
