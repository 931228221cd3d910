"""`rlgraph run | plan | check | fmt | export | eval | import`. Thin: each command imports what it needs when it runs.

`check`, `plan` and `fmt` never import torch, ray or transformers and never run
code named in a spec, so they are fast and safe on a spec from anyone's repo.
Exit codes: 0 clean, 1 errors found, 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import sys

EXIT_OK, EXIT_ERRORS, EXIT_USAGE = 0, 1, 2


def _add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-s", "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a spec value, e.g. -s train.steps=50 (repeatable)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlgraph", description="Declarative RL post-training for language models.")
    sub = parser.add_subparsers(dest="command", required=True)

    check = sub.add_parser("check", help="run every static check on spec files")
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--format", choices=("full", "concise", "json"), default="full")
    _add_overrides(check)

    fmt = sub.add_parser("fmt", help="rewrite spec files in canonical form")
    fmt.add_argument("files", nargs="+", metavar="FILE")
    fmt.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file would change")
    fmt.add_argument("--diff", action="store_true", help="print what would change")

    plan = sub.add_parser("plan", help="show what would run where, memory per device and the step schedule")
    plan.add_argument("file", metavar="FILE")
    plan.add_argument("--format", choices=("text", "json", "dot", "html"), default="text")
    plan.add_argument("-o", "--output", metavar="PATH", help="write to PATH instead of standard output")
    plan.add_argument("--fit", action="store_true", help="when the plan is out of memory, print the smallest "
                      "change verified to fit as a diff of the spec (with -o PATH, write the fitting spec there)")
    _add_overrides(plan)

    run = sub.add_parser("run", help="train: compile, plan, start Ray and run the loop")
    run.add_argument("file", metavar="FILE")
    run.add_argument("--output", metavar="DIR", help="run directory (default runs/<spec name>)")
    run.add_argument("--address", metavar="ADDR", help="Ray cluster to connect to (default: RAY_ADDRESS, "
                     "else a local instance started and stopped by rlgraph)")
    run.add_argument("--no-resume", action="store_true", help="start fresh even if the run directory has checkpoints (the earlier run is moved to DIR/earlier/N/, not deleted)")
    run.add_argument("--accept-changes", action="store_true",
                     help="resume even though the plan differs from the one the checkpoint was trained with")
    _add_overrides(run)

    export = sub.add_parser("export", help="write a run's trained actor as a Hugging Face model folder "
                            "(LoRA adapters merged into their base)")
    export.add_argument("source", metavar="RUN_DIR|CHECKPOINT", help="a run directory (its newest checkpoint), "
                        "a checkpoint folder, or a role's folder in one")
    export.add_argument("--out", required=True, metavar="DIR", help="a new folder for the model and its tokenizer")
    export.add_argument("--role", metavar="NAME", help="the role to export (default: the actor)")
    export.add_argument("--base", metavar="FOLDER", help="the base model of LoRA adapters, where the one their "
                        "adapter_config.json names has moved")

    ev = sub.add_parser("eval", help="score a model (an exported one, a run's newest checkpoint, builtin:arith-gpt) "
                        "on prompts with a rule reward: greedy, and with --n K sampled (mean@K, best@K, pass@k)")
    ev.add_argument("source", metavar="MODEL", help="a model folder, a run directory, a checkpoint, or builtin:NAME")
    ev.add_argument("--spec", metavar="FILE", help="a spec (or plan.json) to take the data, reward and generation "
                    "settings from (default: the plan a checkpoint was trained with)")
    ev.add_argument("--data", action="append", default=[], metavar="FILE", help="prompts (parquet/jsonl or "
                    "builtin:arith/val; repeatable; default: the spec's data.val)")
    ev.add_argument("--reward", metavar="MODULE:FUNCTION", help="the reward function (default: the spec's)")
    ev.add_argument("--n", type=int, metavar="K", help="answers per prompt; K > 1 adds mean@K, best@K and pass@K")
    ev.add_argument("--temperature", type=float, metavar="T", help="sampling temperature of the K answers")
    ev.add_argument("--top-p", type=float, metavar="P")
    ev.add_argument("--top-k", type=int, metavar="K")
    ev.add_argument("--k", dest="ks", type=int, action="append", default=[], metavar="K",
                    help="report pass@K (repeatable; default: the --n value)")
    ev.add_argument("--pass-score", type=float, default=1.0, metavar="S", help="an answer passes pass@k when it "
                    "scores at least S (default 1.0)")
    ev.add_argument("--max-new-tokens", type=int, metavar="N")
    ev.add_argument("--max-prompt-length", type=int, metavar="N")
    ev.add_argument("--batch-size", type=int, metavar="N", help="prompts per generate call (data.val_batch_size)")
    ev.add_argument("--engine", metavar="NAME", help="rollout engine: hf, vllm (default: the spec's rollout's)")
    ev.add_argument("--device", choices=("cpu", "cuda"), help="default: the spec's rollout pool's device")
    ev.add_argument("--seed", type=int, metavar="S")
    ev.add_argument("--role", metavar="NAME", help="the checkpoint's role to evaluate (default: the actor)")
    ev.add_argument("-o", "--output", metavar="RESULT.json", help="write the metrics and every answer as JSON")
    _add_overrides(ev)

    imp = sub.add_parser("import", help="write a spec from another framework's launch (verl: a shell script, "
                         "key=value lines or a YAML config)")
    imp.add_argument("framework", choices=("verl",))
    imp.add_argument("file", metavar="FILE")
    imp.add_argument("--device-memory", metavar="SIZE", help="memory of one device, e.g. 80GiB (verl's launches "
                     "do not state it)")
    imp.add_argument("-o", "--output", metavar="OUT.rl", help="write the spec here instead of standard output")
    imp.add_argument("-s", "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="a verl override after the launch's own, e.g. -s trainer.device=cpu (repeatable)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. SIGTERM and Ctrl-C belong to one StopRequest (runtime/signals.py) from here to the
    end: a signal ends a command with one line and its exit code (143, 130), never a traceback.

    Called without `argv` (the program itself: the `rlgraph` script, `python -m rlgraph.cli`), after a signal or
    when the run's own Ray died under it, the process ends here at once (os._exit): Ray's exit hook would wait
    60 s on a dead GCS, and a thread still importing torch (pre-flight, stopped during start-up) can crash the
    interpreter's finalization. What rlgraph started is already stopped, its output flushed."""
    from rlgraph.runtime.signals import StopRequest

    # the program itself: a stop at once that Python cannot take (the main thread inside one of Ray's C++ calls)
    # ends the process from the signal module's watcher
    stop = StopRequest(ends_process=argv is None)
    with stop.installed():
        try:
            code = _command(_parser().parse_args(argv), stop)
        except KeyboardInterrupt:
            if not stop.received:
                raise
            stop.say_stopped()  # "rlgraph: stopped by ...", unless the command said how it stopped
            code = stop.exit_code
    cluster = sys.modules.get("rlgraph.runtime.cluster")
    if argv is None and (stop.received or (cluster is not None and cluster.RAY_LEFT_DEAD.is_set())):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _command(args: argparse.Namespace, stop) -> int:
    if args.command == "check":
        from rlgraph.commands.check import check_command
        return check_command(args.files, args.overrides, args.format)
    if args.command == "fmt":
        from rlgraph.commands.fmt import fmt_command
        return fmt_command(args.files, check=args.check, diff=args.diff)
    if args.command == "plan":
        if args.fit:
            if args.overrides or args.format != "text":
                sys.stderr.write("rlgraph plan: --fit edits the spec file: write overrides into it, and leave out "
                                 "--format\n")
                return EXIT_USAGE
            from rlgraph.commands.plan import fit_command
            return fit_command(args.file, args.output)
        from rlgraph.commands.plan import plan_command
        return plan_command(args.file, args.overrides, args.format, args.output)
    if args.command == "run":
        from rlgraph.commands.run import run_command
        return run_command(args.file, args.overrides, args.output, args.address, resume=not args.no_resume,
                           accept_changes=args.accept_changes, stop=stop)
    if args.command == "import":
        from rlgraph.commands.import_verl import import_verl_command
        return import_verl_command(args.file, args.device_memory, args.output, args.overrides)
    if args.command == "eval":
        from rlgraph.commands.eval import eval_command
        return eval_command(args.source, spec=args.spec, overrides=args.overrides, data=args.data, reward=args.reward,
                            role=args.role, n=args.n, temperature=args.temperature, top_p=args.top_p,
                            top_k=args.top_k, max_new_tokens=args.max_new_tokens,
                            max_prompt_length=args.max_prompt_length, batch_size=args.batch_size,
                            engine=args.engine, device=args.device, seed=args.seed, ks=args.ks,
                            pass_score=args.pass_score, output=args.output)
    if args.command == "export":
        from rlgraph.commands.export import export_command
        return export_command(args.source, args.out, role=args.role, base=args.base)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
