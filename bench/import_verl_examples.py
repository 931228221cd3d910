"""Import every RL example script of a verl checkout with `rlgraph import verl` and count the outcomes.

    python bench/import_verl_examples.py /work/.mirror/verl-project+verl/repo      # a git directory (HEAD)
    python bench/import_verl_examples.py ~/src/verl -v                           # a work tree; -v: each script

Each script under examples/ (SFT scripts aside: rlgraph imports RL launches) ends in one of: imported,
refused (a clear error, its reason printed), traceback (an importer bug), sets nothing (the launch was
found but no override was read). Nothing from the scripts is run.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import traceback
from pathlib import Path

from rlgraph.commands.import_verl import import_verl_text
from rlgraph.importers.launch import LaunchError
from rlgraph.importers.verl import ImportProblem


def _scripts(source: Path) -> dict[str, bytes]:
    if (source / "HEAD").is_file() and not (source / "examples").is_dir():  # a bare git directory
        git = ["git", f"--git-dir={source}"]
        names = subprocess.run(git + ["ls-tree", "-r", "HEAD", "--name-only"], check=True, capture_output=True,
                               text=True).stdout.split()
        return {name: subprocess.run(git + ["show", f"HEAD:{name}"], check=True, capture_output=True).stdout
                for name in names if name.startswith("examples/") and name.endswith(".sh")}
    return {str(path.relative_to(source)): path.read_bytes() for path in sorted(source.glob("examples/**/*.sh"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="a verl git directory or work tree")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each script's outcome")
    parser.add_argument("-s", "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a verl override for every script, as `rlgraph import verl -s` (repeatable)")
    args = parser.parse_args()
    counts: collections.Counter = collections.Counter()
    reasons: collections.Counter = collections.Counter()
    for name, data in sorted(_scripts(args.source).items()):
        if "/sft/" in name or "sft" in Path(name).name:
            continue
        try:
            _, warnings = import_verl_text(data, name, "80GiB", args.overrides)
            outcome, detail = "imported", f"{len(warnings)} warnings"
        except (LaunchError, ImportProblem) as exc:
            detail = str(exc)
            outcome = "sets nothing" if "sets nothing" in detail else "refused"
            reasons[detail.split(": ", 1)[-1][:90] if outcome == "refused" else detail] += 1
        except Exception:  # the importer's bug: counted, with its traceback
            outcome, detail = "traceback", traceback.format_exc()
        counts[outcome] += 1
        if args.verbose or outcome in ("traceback", "sets nothing"):
            print(f"{outcome:13} {name}: {detail}")
    total = sum(counts.values())
    print(f"\n{total} RL example scripts: " + ", ".join(f"{counts[k]} {k}" for k in
                                                     ("imported", "refused", "traceback", "sets nothing")))
    for reason, count in reasons.most_common():
        print(f"  refused x{count}: {reason}")
    return 1 if counts["traceback"] or counts["sets nothing"] else 0


if __name__ == "__main__":
    sys.exit(main())
