"""What the benchmark scripts share: the work a spec asks for, `rlgraph run` as a timed subprocess,
medians, machine facts and result files.

Every script runs as `python bench/<script>.py`, so this module is imported as `common`.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"
RLGRAPH = [sys.executable, "-m", "rlgraph.cli"]
# Every result file carries the id of the run that made it; run_all.py sets one id for all its scripts and
# renders the doc only from files that carry it, so no figure in the doc comes from another run.
RUN_ID_ENV = "RLGRAPH_BENCH_RUN_ID"
RUN_ID = os.environ.get(RUN_ID_ENV) or f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# verl's per-stage timing names, in step order; `step` is the whole step.
STAGES = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_critic", "update_actor")

# Validation and checkpoints have their own timings; a benchmark run leaves them to the end.
NO_EXTRAS = ["train.validate_every=0", "train.checkpoint_every=0"]


def median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def rounded(value: Any, digits: int = 4) -> Any:
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    return value


def write_result(name: str, result: dict[str, Any], output: str | Path | None = None) -> Path:
    path = Path(output) if output else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rounded({"run_id": RUN_ID, **result}), indent=2) + "\n")
    return path


def spread(values: list[float]) -> dict[str, Any]:
    """Per-run values, their mean and their range: what a comparison over several runs reports."""
    return {"values": list(values), "mean": statistics.fmean(values), "min": min(values), "max": max(values),
            "range": max(values) - min(values)}


def judge(difference: float, noise: float, runs: int) -> str:
    """'met' or 'missed' only when the difference from the target is larger than the noise, else 'within noise';
    '–' from a single run, which has no spread to judge by."""
    if runs < 2:
        return "–"
    if difference > noise:
        return "met"
    return "missed" if difference < -noise else "within noise"


def load_average() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def machine_facts() -> dict[str, Any]:
    """Cores, Python and the versions of what is measured. Imports nothing heavy."""
    from importlib import metadata

    versions = {}
    for name in ("torch", "ray", "transformers", "trl", "accelerate"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    trl_python = BENCH / ".venv-trl" / "bin" / "python"
    if trl_python.exists():  # TRL lives in its own venv
        code = ("from importlib import metadata as m; import json; print(json.dumps({n: m.version(n) for n in "
                "('trl', 'accelerate', 'torch', 'transformers')}))")
        done = subprocess.run([str(trl_python), "-c", code], capture_output=True, text=True)
        if done.returncode == 0:
            versions["trl_venv"] = json.loads(done.stdout)
    cpu_model = None
    try:
        cpu_model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpus": os.cpu_count(), "cpu_model": cpu_model, "python": platform.python_version(),
            "platform": platform.platform(), "versions": versions, "load_average_1min": load_average(),
            "git": git_state()}


def git_state() -> dict[str, Any]:
    """The commit measured, and whether rlgraph/ had uncommitted changes (they are measured too)."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    return {"commit": git("rev-parse", "--short", "HEAD") or None,
            "rlgraph_dirty": bool(git("status", "--porcelain", "--", "rlgraph"))}


# --- the work a spec asks for, read off its Plan ---


@dataclass
class StepWork:
    """The numbers of one training step of a spec: what both the floor and a TRL run must match."""

    spec: str
    model: str
    prompts: int  # data.batch_size
    n: int  # samples per prompt
    max_new_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int
    train: str
    val: str | None
    max_prompt_length: int | None
    estimator: str  # gae | grpo_advantage | ...
    estimator_kwargs: dict[str, Any]
    kl_in_reward: dict[str, Any] | None  # {"coef", "kind"} of a kl_penalty transform
    actor: dict[str, Any]  # optim + loss settings, epochs, mini_batch (samples)
    ref: bool
    critic: dict[str, Any] | None
    micro_batch: dict[str, int | None] = field(default_factory=dict)
    keep_sample_log_probs: bool = False  # `generate -> responses, old_log_prob`: no separate old_log_prob pass

    @property
    def samples(self) -> int:
        return self.prompts * self.n

    def describe(self) -> str:
        a = self.actor
        text = (f"{self.prompts} prompts x {self.n} samples = {self.samples} samples, {self.max_new_tokens} new tokens, "
                f"T={self.temperature}; {self.estimator}; actor lr {a['optim'].get('lr')}, {a['epochs']} epoch(s) of "
                f"mini-batches of {a['mini_batch']} samples")
        if a["loss"].get("kl_loss_coef"):
            text += f", KL loss {a['loss'].get('kl_loss_kind')} x {a['loss']['kl_loss_coef']}"
        if self.kl_in_reward:
            text += f"; KL in reward {self.kl_in_reward['kind']} x {self.kl_in_reward['coef']}"
        if self.critic:
            c = self.critic
            text += (f"; critic lr {c['optim'].get('lr')}, {c['epochs']} epoch(s) of mini-batches of "
                     f"{c['mini_batch']} samples, value clip {c['clip']}")
        return text

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def step_work(spec: str | Path, overrides: list[str] | None = None) -> StepWork:
    """The exact numbers of one step of `spec`, through the compiler and the planner (no torch, no Ray)."""
    from rlgraph.compiler import compile_spec
    from rlgraph.plan.build import build_plan

    plan = build_plan(compile_spec(str(spec), overrides or []))
    errors = [d for d in plan.diagnostics if d["severity"] == "error"]
    if errors:
        raise SystemExit(f"{spec} has errors: {errors[:3]}")
    # The Plan's typed, fully resolved settings (rlgraph.contract.settings): the numbers the runtime trains with.
    calls = list(plan.calls)
    generate = next(c for c in calls if c.kind == "role" and c.method == "generate")
    g = generate.settings
    n = int(g.n)

    def model_of(role) -> str:
        while role.model_path is None and role.colocate:
            role = plan.role(role.colocate)
        return role.model_path

    def optim(role) -> dict[str, Any]:  # PolicyWorker's / CriticWorker's keyword names
        o = role.settings.optim
        return {"lr": o.lr, "betas": tuple(o.betas), "weight_decay": o.weight_decay, "warmup_steps": o.warmup_steps,
                "grad_clip": o.grad_clip}

    def update_of(kind: str):
        return next((c for c in calls if c.kind == "role" and c.role_kind == kind and c.method == "update"), None)

    def mini(settings) -> int | None:  # prompts per optimizer step -> samples
        return settings.minibatch * n if settings.minibatch else None

    actor_role = next(r for r in plan.roles if r.kind == "actor")
    u = update_of("actor").settings
    loss = {"clip_low": u.clip_low, "clip_high": u.clip_high, "clip_c": u.clip_c, "loss_agg": u.loss_agg,
            "kl_loss_coef": u.kl_coef, "kl_loss_kind": u.kl_kind, "policy_loss": u.policy_loss,
            "entropy_coeff": u.entropy_coeff}
    actor = {"optim": optim(actor_role), "loss": loss, "epochs": u.epochs, "mini_batch": mini(u)}

    critic = None
    critic_update = update_of("critic")
    if critic_update is not None:
        c = critic_update.settings
        critic = {"optim": optim(plan.role(critic_update.target)), "epochs": c.epochs, "mini_batch": mini(c),
                  "clip": c.clip, "loss_agg": c.loss_agg}
    kl = next((c for c in calls if c.kind == "transform" and c.target == "kl_penalty"), None)
    estimator = next(c for c in calls if c.kind == "transform" and c.target != "kl_penalty")
    return StepWork(
        spec=str(spec), model=model_of(actor_role), prompts=int(plan.data.batch_size), n=n,
        max_new_tokens=int(g.max_new_tokens), temperature=float(g.temperature), top_p=float(g.top_p),
        top_k=int(g.top_k), seed=int(plan.train.seed), train=plan.data.train[0], val=plan.data.val[0] if plan.data.val else None,  # bench specs: one file each
        max_prompt_length=plan.data.max_prompt_length, keep_sample_log_probs=bool(g.keep_log_probs),
        estimator=estimator.target,
        estimator_kwargs={k: v for k, v in asdict(estimator.settings).items() if v is not None},
        kl_in_reward={"coef": kl.settings.coef, "kind": kl.settings.kind} if kl else None,
        actor=actor, ref=any(r.kind == "ref" for r in plan.roles), critic=critic,
        micro_batch={r.name: r.settings.micro_batch for r in plan.roles if r.kind in ("actor", "ref", "critic")},
    )


# --- `rlgraph run` as a user runs it, timed from outside ---


@dataclass
class RunTrace:
    """One `rlgraph run` subprocess: its metrics, and when each console line and metrics line appeared."""

    returncode: int
    wall_s: float  # the whole command
    records: list[dict[str, Any]]  # metrics.jsonl
    record_times: list[float]  # seconds after the command started, one per record
    lines: list[tuple[float, str]]  # console lines, with the same clock
    run_dir: str

    def steps(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("training/global_step", 0) >= 1]

    def step_medians(self, warmup: int) -> dict[str, float | None]:
        """Median `timing_s/*` per stage and for the step, leaving out the first `warmup` steps."""
        steps = self.steps()[warmup:]
        out = {name: median([r.get(f"timing_s/{name}") for r in steps]) for name in (*STAGES, "step")}
        return out

    def wall_between_steps(self, warmup: int) -> list[float]:
        """Seconds between consecutive step records: what a step costs in wall time, logging included.

        The last step also validates and writes a checkpoint, so its interval is left out."""
        times = [t for r, t in zip(self.records, self.record_times) if r.get("training/global_step", 0) >= 1]
        gaps = [b - a for a, b in zip(times, times[1:])][warmup:]
        return gaps[:-1] if len(gaps) > 1 else gaps

    def line_time(self, text: str) -> float | None:
        return next((t for t, line in self.lines if text in line), None)


STOP_GRACE_S = 20.0  # after SIGINT: the run stops as on Ctrl-C and shuts its Ray down; then SIGKILL


def run_rlgraph(spec: str | Path, overrides: list[str], run_dir: str | Path, *, timeout_s: float = 900,
                stop: Callable[[list[dict[str, Any]], list[float]], bool] | None = None) -> RunTrace:
    """`rlgraph run spec -s ... --output run_dir --no-resume` as a fresh process, traced from outside.

    A watcher notes when each line of metrics.jsonl appears (polling every 10 ms), so start-up and
    per-step wall times are measured by the same clock as the command itself. With `stop`, the
    watcher calls it with the records so far and their times whenever a line appears, and stops the run once it
    returns True: SIGINT, as Ctrl-C (the run stops cleanly, shuts its Ray down and exits 130), then SIGKILL to
    the run's process group if it is still there after STOP_GRACE_S. A shell that runs the bench in the
    background starts it with SIGINT ignored, and a child inherits that; the run is started with SIGINT's
    default restored, and the SIGKILL does not depend on it anyway. (SIGTERM is no cleaner: Ray's handler
    exits from inside `ray.get` and the process aborts.) The run has a process group of its own, so the SIGKILL
    takes every process it started, and nothing outlives the bench.
    """
    run_dir = Path(run_dir)
    command = [*RLGRAPH, "run", str(spec), "--output", str(run_dir), "--no-resume"]
    for override in overrides:
        command += ["-s", override]
    env = dict(os.environ, PYTHONUNBUFFERED="1", COLUMNS="200", TERM="dumb")
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        metrics.unlink()
    lines: list[tuple[float, str]] = []
    record_times: list[float] = []
    stopped = threading.Event()
    done = threading.Event()
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, bufsize=1, start_new_session=True, preexec_fn=_default_sigint)

    def watch() -> None:
        seen = 0
        while not done.is_set():
            try:
                text = metrics.read_text() if metrics.exists() else ""
            except OSError:
                text = ""
            complete = text[: text.rfind("\n") + 1]
            count = complete.count("\n")
            if count > seen:
                now = time.perf_counter() - start
                record_times.extend([now] * (count - seen))  # --no-resume empties the file first: growth only
                seen = count
                if stop is not None and not stopped.is_set():
                    records = [json.loads(line) for line in complete.splitlines() if line.strip()]
                    if stop(records, list(record_times)):
                        stopped.set()
                        threading.Thread(target=terminate, args=(process,), daemon=True).start()
            done.wait(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append((time.perf_counter() - start, line.rstrip("\n")))
        process.wait(timeout=timeout_s)
    finally:  # a timeout, Ctrl-C on the bench, a stop: nothing of the run may keep running
        if process.poll() is not None and stopped.is_set():
            kill_group(process.pid)  # stragglers of a stopped run (its Ray workers)
        elif process.poll() is None:
            terminate(process)
    wall = time.perf_counter() - start
    time.sleep(0.03)
    done.set()
    watcher.join()
    records = []
    if metrics.exists():
        text = metrics.read_text()
        records = [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines() if line.strip()]
    while len(record_times) < len(records):  # a record the watcher missed at the very end
        record_times.append(wall)
    trace = RunTrace(process.returncode, wall, records, record_times[: len(records)], lines, str(run_dir))
    if process.returncode != 0 and not stopped.is_set():
        tail = "\n".join(line for _, line in lines[-30:])
        raise RuntimeError(f"{' '.join(command)} exited {process.returncode}:\n{tail}")
    return trace


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # in the child, before exec: Python then maps it to Ctrl-C


def terminate(process: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGINT to the run (Ctrl-C), SIGKILL to its whole process group if it has not exited after `grace_s`."""
    try:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    kill_group(process.pid)


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already


def python_json(command: list[str], *, env: dict[str, str] | None = None, timeout_s: float = 900) -> dict[str, Any]:
    """Run a bench worker subprocess that prints one JSON object as its last stdout line."""
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env, timeout=timeout_s)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    last = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not last:
        raise RuntimeError(f"{' '.join(command)} printed no JSON:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return json.loads(last[-1])


def one_thread_env() -> dict[str, str]:
    """torch and OpenMP on one thread: on this 2-core machine one thread per process is the fast setting."""
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
