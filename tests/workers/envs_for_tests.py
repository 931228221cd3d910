"""Environments for tests/workers/test_env_pool.py, loaded by file (`envs_for_tests.py:Class`) as a spec's
own environment would be. What each does wrong is chosen by the data row, so one batch mixes good and bad
episodes."""

from __future__ import annotations

import os
import signal
import sys
import time

from rlgraph.workers.envs.base import Environment, Observation, Turn, tool_schema


class Counter(Environment):
    """Replies `episode <id> turn <n>`; what a row's `fault` names happens at step `fault_at`."""

    tools = [tool_schema("count", "Counts.", {"by": {"type": "integer"}})]

    def __init__(self, start: int = 0, log: str | None = None) -> None:
        self.turns, self.log = start, log

    def reset(self, row):
        self.id, self.fault, self.fault_at = row["id"], row.get("fault"), row.get("fault_at", 0)
        return Observation(text=f"episode {self.id} starts") if row.get("greet") else None

    def step(self, turn: Turn):
        if turn.index == self.fault_at:
            if self.fault == "raise":
                raise ValueError(f"bad turn in episode {self.id}")  # the line the traceback must name
            if self.fault == "hang":
                time.sleep(100)
            if self.fault == "stubborn":  # catches the alarm's exception, whatever it is, and blocks again
                try:
                    time.sleep(100)
                except BaseException:
                    time.sleep(100)
            if self.fault == "slow":
                time.sleep(0.5)
            if self.fault == "exit":
                os._exit(3)
            if self.fault == "self_kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.fault == "garbage":
                return "not an observation"
            if self.fault == "nan":
                return {"text": "x", "reward": float("nan")}
        self.turns += 1
        if self.fault == "modules":  # what the process imported besides the environment's module
            heavy = [name for name in ("torch", "transformers", "ray", "numpy") if name in sys.modules]
            return Observation(text=" ".join(heavy) or "none")
        if self.fault == "dict":  # a plain dict with Observation's keys is taken too
            return {"token_ids": [self.id, self.turns], "reward": 1, "done": self.turns >= 3}
        return Observation(text=f"episode {self.id} turn {self.turns} {turn.text}", reward=float(self.turns),
                           done=self.turns >= 3)


    def close(self):
        if self.log is not None:
            with open(self.log, "a") as f:
                f.write(f"closed {self.id}\n")
        if self.fault == "close":
            raise RuntimeError("close failed")


class NoStep(Environment):
    pass


class BadTools(Environment):
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {"type": "string"}}}]

    def step(self, turn):
        return Observation()


def not_a_class():
    return Counter()
