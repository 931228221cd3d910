"""What a person sees during a run: on a terminal a progress bar (step, reward, last validation, ETA); in a log
file or a pipe (`tee`, a batch job) one line of the step's key metrics per step; then a summary."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

ETA_BOUND_S = 365 * 24 * 3600  # past this an estimate says only that it is long


class EtaColumn(TimeRemainingColumn):
    """rich's estimate from the pace of the last steps: `--` until two steps have been timed, `> 1 year` past the
    bound (train.steps in the billions would otherwise show an hours count of twenty digits)."""

    def render(self, task: Any) -> Text:
        remaining = task.time_remaining
        if task.total is None or remaining is None:
            return Text("--", style="progress.remaining")
        if remaining > ETA_BOUND_S:
            return Text("> 1 year", style="progress.remaining")
        return super().render(task)


class RunConsole:
    """Progress and messages; `enabled=False` keeps a run silent (tests, library use)."""

    def __init__(self, console: Console | None = None, enabled: bool = True, ray_log: Path | None = None) -> None:
        """`ray_log`: the file `ray_logs_to_file` sends Ray's own messages to."""
        self.console = console or Console()
        self.enabled = enabled
        self.ray_log = ray_log
        self.progress: Progress | None = None
        self.task = None
        self.total = 0  # the run's last step, for the step lines

    @contextlib.contextmanager
    def ray_logs_to_file(self) -> Iterator[None]:
        """Ray's own messages go to `ray_log`, not over the progress bar: its "ray" logger, and what the
        driver hears from the raylet and the autoscaler ("a worker died ...", which rlgraph reports itself
        as a WorkerError or ProcessDiedError naming the role). Enter before ray.init, which keeps handlers."""
        if self.ray_log is None:
            yield
            return
        handler = logging.FileHandler(self.ray_log, delay=True)  # no file for a run Ray said nothing about
        ray_logger = logging.getLogger("ray")
        saved = ray_logger.handlers[:], ray_logger.propagate
        ray_logger.handlers, ray_logger.propagate = [handler], False
        # The driver prints the raylet's and autoscaler's messages with this function (Ray 2.x), bypassing
        # logging; a Ray without it prints them as before.
        worker = sys.modules.get("ray._private.worker")
        printer = getattr(worker, "print_to_stdstream", None)
        if printer is not None:
            def to_file(data: dict[str, Any], *args: Any, **kwargs: Any) -> None:
                for line in data.get("lines", []):
                    handler.handle(logging.makeLogRecord({"name": "ray", "levelno": logging.WARNING,
                                                          "levelname": "WARNING", "msg": f"({data.get('pid')}) {line}"}))
            worker.print_to_stdstream = to_file
        try:
            yield
        finally:
            if printer is not None:
                worker.print_to_stdstream = printer
            ray_logger.handlers, ray_logger.propagate = saved
            handler.close()

    def log(self, message: str) -> None:
        if not self.enabled:
            return
        (self.progress.console if self.progress else self.console).print(message, highlight=False)

    def sample(self, sample: dict[str, Any], width: int = 60) -> None:
        """One row of samples.jsonl as a line: the model's text may hold markup brackets and newlines."""
        def short(value: Any) -> str:
            text = repr(str(value))
            return text if len(text) <= width else text[: width - 4] + "...'"

        def number(value: float | None) -> str:
            return "-" if value is None else f"{value:.3f}"

        self.log(escape(f"step {sample['step']} sample: {short(sample['prompt'])} -> {short(sample['response'])} "
                        f"(truth {short(sample['ground_truth'])}) score {number(sample['score'])} "
                        f"advantage {number(sample['advantage'])}"))

    def start(self, total: int, done: int) -> None:
        """The progress bar on a terminal; elsewhere a bar is drawn only once, at its end, so `step_done` writes
        a line per step instead."""
        if not self.enabled:
            return
        self.total = total
        if not self.console.is_terminal:
            return
        self.progress = Progress(
            TextColumn("[bold]step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("reward {task.fields[reward]}"),
            TextColumn("val {task.fields[val]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            EtaColumn(),
            console=self.console,
            transient=False,
        )
        self.progress.start()
        self.task = self.progress.add_task("train", total=total, completed=done, reward="-", val="-")

    def update(self, step: int, reward: float | None, val: float | None) -> None:
        if self.progress is None:
            return
        fields: dict[str, Any] = {}
        if reward is not None:
            fields["reward"] = f"{reward:.3f}"
        if val is not None:
            fields["val"] = f"{val:.3f}"
        self.progress.update(self.task, completed=step, **fields)

    def step_done(self, step: int, record: dict[str, Any], last_val: float | None) -> None:
        """Step `step` is done (`record`: its line of metrics.jsonl): the bar moves, or its line is written."""
        if self.progress is not None:
            self.update(step, record.get("critic/score/mean"), last_val)
        elif self.enabled:
            self.console.print(escape(step_line(step, self.total, record)), highlight=False, soft_wrap=True)

    def stop(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None

    def summary(self, rows: list[tuple[str, str, str]], title: str) -> None:
        if not self.enabled:
            return
        table = Table(title=title, title_justify="left")
        table.add_column("")
        table.add_column("start", justify="right")
        table.add_column("end", justify="right")
        for row in rows:
            table.add_row(*row)
        self.console.print(table)


# (label, metrics.jsonl key, format) of a step line, in order; a key the step has not is left out
STEP_LINE = (
    ("reward", "critic/score/mean", ".3f"),
    ("sft_loss", "actor/sft_loss", ".3f"),
    ("distill_loss", "actor/distill_loss", ".3f"),
    ("val", "val/score/mean", ".3f"),
    ("val_loss", "val/sft_loss", ".3f"),
    ("kl", "actor/kl_loss", ".4g"),
    ("reward_kl", "actor/reward_kl_penalty", ".4g"),
    ("entropy", "actor/entropy", ".3f"),
    ("grad_norm", "actor/grad_norm", ".3g"),
    ("zero_adv", "batch/zero_advantage_groups", ".2f"),
    ("resp_len", "response_length/mean", ".1f"),
)


def step_line(step: int, total: int, record: dict[str, Any]) -> str:
    """One step's key metrics on one line, as verl's console logger prints them: `step 3/10 | reward 0.250 | ...`."""
    parts = [f"step {step}/{total}"]
    parts += [f"{label} {record[key]:{fmt}}" for label, key, fmt in STEP_LINE if isinstance(record.get(key), (int, float))]
    if isinstance(record.get("timing_s/step"), (int, float)):
        parts.append(f"{record['timing_s/step']:.2f} s")
    return " | ".join(parts)
