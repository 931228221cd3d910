"""How often specs/grpo_arith_judge.rl's judge agrees with the rule it stands in for.

    .venv/bin/python bench/judge_agreement.py [--n 2] [--seed 0]

The built-in policy (builtin:arith-gpt) samples `n` answers to each of the 500 validation prompts at
temperature 1, as the recipe's rollout does; the recipe's judge (builtin:arith-gpt-teacher asked the prompt,
parser rlgraph.tasks.arith_judge:same_answer, greedy) scores them through the JudgeWorker, and the rule
(rlgraph.tasks.arith:exact_match) scores them too. Prints both means, the agreement and both kinds of
disagreement.
"""

from __future__ import annotations

import argparse


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from rlgraph.contract import settings as s
    from rlgraph.data.dataset import RLDataset
    from rlgraph.models import resolve_model_path
    from rlgraph.tasks.arith import exact_match, make_rows
    from rlgraph.workers.judge import JudgeWorker
    from rlgraph.workers.rollout import RolloutWorker

    torch.set_num_threads(1)  # a tiny model: one thread is as fast, and fair to a shared machine
    val = s.ValSettings(n=1, temperature=0.0, top_p=1.0, top_k=0)
    policy = RolloutWorker(resolve_model_path("builtin:arith-gpt"), s.RolloutSettings(
        engine="hf", n=args.n, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4, tp=1, memory_fraction=0.5,
        max_sequences=None, dtype="float32", val=val), seed=args.seed)
    rollout = policy.generate(RLDataset(make_rows("val"), policy.tokenizer).items, settings=s.GenerateSettings(
        n=args.n, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=4, keep_log_probs=False, env=None),
        seed=args.seed)
    judge = JudgeWorker(resolve_model_path("builtin:arith-gpt-teacher"), s.JudgeSettings(
        engine="hf", template="{{ prompt }}", parser="rlgraph.tasks.arith_judge:same_answer", base_dir=".",
        max_new_tokens=4, temperature=0.0, max_sequences=None, memory_fraction=0.5, dtype="float32",
        max_invalid_fraction=1.0), seed=args.seed)
    judged = judge.score(rollout, settings=s.NoSettings()).sum(-1)  # (batch,) NaN: no score
    rule = torch.tensor([exact_match(d, r, t) for d, r, t in
                         zip(rollout.data_source, rollout.response_text, rollout.ground_truth)])
    scored = ~torch.isnan(judged)
    print(f"samples {len(rollout)}, verdicts without a score {int((~scored).sum())}")
    print(f"mean score: rule {rule.mean():.3f}, judge {judged[scored].mean():.3f}")
    print(f"agreement {(judged[scored] == rule[scored]).float().mean():.3f}: judge 1 where the rule says 0: "
          f"{int(((judged == 1) & (rule == 0)).sum())}, judge 0 where the rule says 1: {int(((judged == 0) & (rule == 1)).sum())}")


if __name__ == "__main__":
    main()
