"""Where each step's metrics go besides metrics.jsonl: the loggers a spec names in `train { loggers = [...] }`
(verl's `trainer.logger = ['console', 'wandb']`).

    console      the progress bar and the end-of-run table, which `rlgraph run` shows in any case
    tensorboard  scalars under <run dir>/tensorboard (`tensorboard --logdir <run dir>`)
    wandb        a Weights & Biases run named after the run directory; WANDB_PROJECT (default "rlgraph"),
                 WANDB_MODE=offline and the rest of wandb's environment apply
    mlflow       an MLflow run named after the run directory, in the experiment MLFLOW_EXPERIMENT_NAME (default
                 "rlgraph"), tracked at MLFLOW_TRACKING_URI (default: the file store <run dir>/mlruns,
                 with MLFLOW_ALLOW_FILE_STORE=true, which MLflow 3 asks for)

Each logger imports its package only when a run names it. A logger that fails mid-run (a lost
connection) is dropped with a warning: a run is not stopped for its dashboards, metrics.jsonl has it all.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

# logger -> (the package it needs, the extra that installs it); console needs nothing
LOGGERS: dict[str, tuple[str, str] | None] = {
    "console": None,
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
}


def missing_packages(names: tuple[str, ...] | list[str]) -> list[str]:
    """One line per named logger that is unknown or whose package is not installed (nothing is imported)."""
    problems = []
    for name in dict.fromkeys(names):
        if name not in LOGGERS:
            problems.append(f"train.loggers names {name!r}, which is not a logger; the loggers are: "
                            f"{', '.join(LOGGERS)}")
            continue
        needs = LOGGERS[name]
        if needs is not None and importlib.util.find_spec(needs[0]) is None:
            problems.append(f"train.loggers names {name}, but the {needs[0]} package is not installed: "
                            f"pip install 'rlgraph[{needs[1]}]'")
    return problems


class TensorBoardLogger:
    def __init__(self, run_dir: Path, resume_after: int | None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # a resumed run writes the steps after its checkpoint again: TensorBoard drops its older events there
        purge = None if resume_after is None else resume_after + 1
        self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=purge)

    def log(self, scalars: dict[str, float], step: int) -> None:
        for key, value in scalars.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    def __init__(self, run_dir: Path, resume_after: int | None) -> None:
        import wandb

        # console="off": wandb does not capture the terminal (and the progress bar on it); quiet: no history
        # table at the end, which the run's own summary table already gives
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "rlgraph"), name=run_dir.name,
                              dir=str(run_dir), settings=wandb.Settings(console="off", quiet=True))

    def log(self, scalars: dict[str, float], step: int) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowLogger:
    def __init__(self, run_dir: Path, resume_after: int | None) -> None:
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI")
        if not uri:  # beside the run's other files; MLflow 3 serves a file store only when told it may
            uri = (run_dir / "mlruns").resolve().as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(tracking_uri=uri)
        experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", "rlgraph")
        experiment = self.client.get_experiment_by_name(experiment_name)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(experiment_name)
        self.run_id = self.client.create_run(experiment_id, run_name=run_dir.name).info.run_id

    def log(self, scalars: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(mlflow_name(k), v, now, step) for k, v in scalars.items()])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def mlflow_name(key: str) -> str:
    """A metric name MLflow takes: `val/score/mean@4` -> `val/score/mean_at_4` (no '@' and the like)."""
    return re.sub(r"[^\w\-. /:]", "_", key.replace("@", "_at_"))


_CLASSES = {"tensorboard": TensorBoardLogger, "wandb": WandbLogger, "mlflow": MlflowLogger}


class Loggers:
    """The named loggers of one run, fed one record per step."""

    def __init__(self, names: tuple[str, ...] | list[str], run_dir: Path, resume_after: int | None) -> None:
        """`resume_after`: the checkpoint's step when the run resumes (the records after it are written again)."""
        self.loggers: dict[str, Any] = {}
        for name in dict.fromkeys(names):
            if name in _CLASSES:
                self.loggers[name] = _CLASSES[name](run_dir, resume_after)

    def log(self, record: dict[str, Any]) -> None:
        if not self.loggers:
            return
        step = int(record.get("training/global_step", 0))
        scalars = {k: float(v) for k, v in record.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "training/global_step"}
        for name, logger in list(self.loggers.items()):
            try:
                logger.log(scalars, step)
            except Exception as err:  # a dashboard is not worth a run
                print(f"warning: logger {name} failed ({type(err).__name__}: {err}); the run goes on without it "
                      "(metrics.jsonl has every step)", file=sys.stderr)
                del self.loggers[name]

    def close(self) -> None:
        for logger in self.loggers.values():
            try:
                logger.close()
            except Exception:  # the run has ended well; a dashboard that cannot say goodbye does not change that
                pass
        self.loggers = {}
