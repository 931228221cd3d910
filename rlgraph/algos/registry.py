"""Name -> function tables that the runtime resolves spec calls such as `grpo_advantage(norm_by_std = true)` in."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping

from rlgraph.algos.advantages import (
    distill_advantage,
    gae,
    grpo_advantage,
    reinforce_pp_advantage,
    reinforce_pp_baseline_advantage,
    remax_advantage,
    rloo_advantage,
)
from rlgraph.algos.losses import cispo_policy_loss, gspo_policy_loss, policy_loss

ADVANTAGE_ESTIMATORS: dict[str, Callable] = {
    "gae": gae,
    "grpo_advantage": grpo_advantage,
    "rloo_advantage": rloo_advantage,
    "reinforce_pp_advantage": reinforce_pp_advantage,
    "reinforce_pp_baseline_advantage": reinforce_pp_baseline_advantage,
    "remax_advantage": remax_advantage,
    "distill_advantage": distill_advantage,
}

POLICY_LOSSES: dict[str, Callable] = {
    "vanilla": policy_loss,
    "gspo": gspo_policy_loss,
    "cispo": cispo_policy_loss,
}


def close_names(name: str, known: list[str], n: int = 3) -> list[str]:
    """Likely intended names: case-insensitive matches, then names it is a prefix of, then difflib."""
    query, by_lower = name.lower(), {k.lower(): k for k in known}
    ranked = [k for lower, k in by_lower.items() if lower.startswith(query)]  # exact case-folded match first
    ranked.sort(key=lambda k: k.lower() != query)
    ranked += [by_lower[lower] for lower in difflib.get_close_matches(query, by_lower, n=n)]
    return list(dict.fromkeys(ranked))[:n]


def lookup(table: Mapping[str, Callable], name: str, what: str) -> Callable:
    """table[name], or a KeyError that names the closest entries."""
    try:
        return table[name]
    except KeyError:
        close = close_names(name, list(table))
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise KeyError(f"unknown {what} {name!r}{hint} (known: {', '.join(sorted(table))})") from None


def get_advantage_estimator(name: str) -> Callable:
    return lookup(ADVANTAGE_ESTIMATORS, name, "advantage estimator")


def get_policy_loss(name: str) -> Callable:
    return lookup(POLICY_LOSSES, name, "policy loss")
