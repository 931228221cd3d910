"""Skipped updates: a warning for each step where a trained role skipped an optimizer update, an error
when it skipped all of them for several steps.

A trained role skips an update whose gradient norm is not finite (rlgraph/workers/optim.py
`clip_and_step`, as verl does) and reports the share it skipped as `<role>/skipped_update_frac`. One such
update now and then is survivable; a role that skips every update is not learning at all (its weights,
or its loss, have gone non-finite), and a run that went on would only spend its time and end with exit 0.
"""

from __future__ import annotations

from typing import Any, Callable

from rlgraph.runtime.errors import RunError

SUFFIX = "/skipped_update_frac"
FAIL_AFTER_STEPS = 3  # steps in a row with every update skipped; a shorter run fails at its end (`finish`)


class UpdateGuard:
    def __init__(self) -> None:
        self.in_a_row: dict[str, list[int]] = {}  # role -> the steps in a row with every update skipped
        self.steps_seen = 0
        self.every_step_skipped: dict[str, bool] = {}  # role -> whether each step of this run skipped everything

    def observe(self, step: int, record: dict[str, Any], warn: Callable[[str], None]) -> None:
        """Warn about the step's skipped updates; raise RunError once a role skipped all of them for
        FAIL_AFTER_STEPS steps in a row."""
        self.steps_seen += 1
        for name, frac in record.items():
            if not name.endswith(SUFFIX) or frac is None:
                continue
            role = name[: -len(SUFFIX)]
            all_skipped = frac >= 1.0
            self.every_step_skipped[role] = self.every_step_skipped.get(role, True) and all_skipped
            self.in_a_row[role] = self.in_a_row.get(role, []) + [step] if all_skipped else []
            if frac > 0:
                share = "every optimizer update" if all_skipped else f"{frac:.0%} of its optimizer updates"
                warn(f"[yellow]warning[/]: step {step}: `{role}` skipped {share}: the gradient norm was not finite "
                     f"({role}/grad_norm = {record.get(f'{role}/grad_norm')}), so those updates did not change its "
                     "weights")
            if len(self.in_a_row[role]) >= FAIL_AFTER_STEPS:
                steps = self.in_a_row[role]
                raise RunError(_failure(role, f"steps {steps[0]}-{steps[-1]}"))

    def finish(self) -> None:
        """At the end of a run shorter than FAIL_AFTER_STEPS: a role that skipped every update of it fails it."""
        if not self.steps_seen:
            return
        for role, skipped in self.every_step_skipped.items():
            if skipped:
                raise RunError(_failure(role, f"all {self.steps_seen} step(s) of this run"))


def _failure(role: str, when: str) -> str:
    return (f"`{role}` skipped every optimizer update of {when}: its gradient norm was not finite each time, so it "
            "is not learning. A loss that overflows (a learning rate too high, huge rewards or advantages) or "
            "weights that are already NaN cause this; metrics.jsonl shows the step where its losses turned null. "
            "Lower the learning rate, or resume from a checkpoint before that step.")
