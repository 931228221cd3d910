"""Curves of a multi-turn tool run (specs/grpo_arith_tool.rl): how the accuracy rose, and why.

    python bench/plot_tool_run.py RUN_DIR docs/images/arith_tool_curves.png

Left: greedy validation accuracy (val/score/mean) and the training reward. Right: the tool-call rate (share of
samples that called the tool) and the tool-error rate (share of calls that failed), of the training samples
(temperature 1) and of the greedy validation answers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(run_dir: str, out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]

    def series(key: str) -> list[tuple[int, float]]:
        return [(r["training/global_step"], r[key]) for r in records if r.get(key) is not None]

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), dpi=100)
    for key, label, style in (("val/score/mean", "greedy val accuracy", "o-"),
                              ("critic/score/mean", "training reward (T = 1)", "-")):
        if series(key):
            left.plot(*zip(*series(key)), style, label=label, alpha=0.85)
    left.set_xlabel("step")
    left.set_ylim(-0.02, 1.02)
    left.grid(alpha=0.3)
    left.legend(loc="lower right")
    left.set_title("accuracy")
    for key, label, style in (("tool_calls/rate", "tool-call rate (train)", "-"),
                              ("val/tool_calls/rate", "tool-call rate (greedy val)", "o-"),
                              ("tool_errors/rate", "tool-error rate (train)", "--"),
                              ("val/tool_errors/rate", "tool-error rate (greedy val)", "s--")):
        if series(key):
            right.plot(*zip(*series(key)), style, label=label, alpha=0.85)
    right.set_xlabel("step")
    right.set_ylim(-0.02, 1.02)
    right.grid(alpha=0.3)
    right.legend(loc="center right")
    right.set_title("tool use")
    fig.tight_layout()
    fig.savefig(out)
    print(out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
