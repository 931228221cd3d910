"""What every built-in model's build script shares: a deterministic training context, the folder it
writes (weights, tokenizer, then rlgraph_build.json last), and its command line."""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BUILD_REPORT = "rlgraph_build.json"  # written last: the registry takes a folder holding it as complete


@contextlib.contextmanager
def deterministic(seed: int, num_threads: int) -> Iterator[None]:
    """Seeded, on `num_threads` torch threads; the global RNG state and thread count are restored after.

    One thread also keeps a busy machine from stalling a build: with two threads on two shared cores,
    a step can take ten times longer."""
    import torch

    threads_before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    finally:
        torch.set_num_threads(threads_before)


def save_build(out: str | Path, model: Any, tokenizer: Any, report: dict[str, Any]) -> Path:
    """The model (safetensors) and the character tokenizer into `out`, then the build report."""
    from rlgraph.models.char_tokenizer import save_char_tokenizer

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    save_char_tokenizer(tokenizer, out)
    (out / BUILD_REPORT).write_text(json.dumps(report, indent=2) + "\n")
    return out


def build_main(module: str, doc: str, build: Callable[..., dict], argv: list[str] | None = None) -> int:
    """`python -m MODULE --out DIR`: run `build(DIR, log=print)`."""
    parser = argparse.ArgumentParser(prog=f"python -m {module}", description=doc.split("\n")[0])
    parser.add_argument("--out", required=True, help="folder to write the model into (made if missing)")
    args = parser.parse_args(argv)
    build(args.out, log=print)
    return 0
