"""rlgraph/runtime/console.py: a progress bar on a terminal, one line per step elsewhere (a pipe, `tee`, a batch job)."""

from __future__ import annotations

import io

from rich.console import Console

from rlgraph.runtime.console import RunConsole, step_line

RECORD = {"critic/score/mean": 0.25, "actor/kl_loss": 0.0012, "actor/entropy": 1.5, "actor/grad_norm": 0.75,
          "timing_s/step": 1.234}


def steps(console: Console) -> str:
    run = RunConsole(console)
    run.start(total=2, done=0)
    run.step_done(1, RECORD, None)
    run.step_done(2, RECORD | {"val/score/mean": 0.5}, 0.5)
    run.stop()
    return console.file.getvalue()


def test_off_a_terminal_each_step_is_one_line_of_its_key_metrics():
    out = steps(Console(file=io.StringIO(), width=40))  # narrower than a line: it is not wrapped
    assert out.splitlines() == [
        "step 1/2 | reward 0.250 | kl 0.0012 | entropy 1.500 | grad_norm 0.75 | 1.23 s",
        "step 2/2 | reward 0.250 | val 0.500 | kl 0.0012 | entropy 1.500 | grad_norm 0.75 | 1.23 s",
    ]


def test_on_a_terminal_the_progress_bar_instead():
    out = steps(Console(file=io.StringIO(), force_terminal=True, width=120))
    assert "eta" in out and "2/2" in out and "| reward" not in out


def test_a_step_line_leaves_out_what_the_step_has_not():
    assert step_line(3, 10, {"critic/score/mean": 1.0, "actor/entropy": None}) == "step 3/10 | reward 1.000"


def _eta(total: int, updates: list[tuple[float, int]]) -> str:
    """The ETA column's text after `updates` (clock seconds, steps done) on a bar of `total` steps."""
    from rich.progress import Progress

    from rlgraph.runtime.console import EtaColumn

    now = [0.0]
    progress = Progress(EtaColumn(), get_time=lambda: now[0], console=Console(file=io.StringIO()))
    task = progress.add_task("train", total=total, completed=0)
    for clock, done in updates:
        now[0] = clock
        progress.update(task, completed=done)
    return EtaColumn().render(progress.tasks[0]).plain


def test_the_eta_is_dashes_until_two_steps_are_timed_then_their_pace():
    assert _eta(10, []) == "--"
    assert _eta(10, [(2.0, 1)]) == "--"
    assert _eta(10, [(2.0, 1), (4.0, 2)]) == "0:00:16"  # 2 s a step, 8 steps to go


def test_an_eta_beyond_any_use_is_bounded_not_a_number_of_twenty_digits():
    assert _eta(10**22, [(2.0, 1), (4.0, 2)]) == "> 1 year"
