"""What a person sees during a run: a progress bar (step, reward, last validation, ETA), then a summary."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table


class RunConsole:
    """Progress and messages; `enabled=False` keeps a run silent (tests, library use)."""

    def __init__(self, console: Console | None = None, enabled: bool = True) -> None:
        self.console = console or Console()
        self.enabled = enabled
        self.progress: Progress | None = None
        self.task = None

    def log(self, message: str) -> None:
        if not self.enabled:
            return
        (self.progress.console if self.progress else self.console).print(message, highlight=False)

    def start(self, total: int, done: int) -> None:
        if not self.enabled:
            return
        self.progress = Progress(
            TextColumn("[bold]step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("reward {task.fields[reward]}"),
            TextColumn("val {task.fields[val]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
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
