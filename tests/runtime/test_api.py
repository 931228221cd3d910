"""docs/api.md's notebook runs as written, and its run is `rlgraph run`'s run: the same inputs written into the
run directory, the same metrics, the same trained weights (the notebook stops after step 1 from its callback
and resumes; a resumed run ends as one that never stopped, test_resume.py)."""

from __future__ import annotations

import json
import math
import re

import torch

from tests.tolerances import FP32_AFTER_UPDATE, FP32_REORDERED

from .helpers import REPO, fast, read_metrics

DOC = REPO / "docs" / "api.md"
NOTEBOOK = "## A notebook, start to end"
SKIP = ("timing_s/", "startup_s/", "perf/time_per_step", "perf/throughput")  # clocks, not training


def notebook_cells() -> list[tuple[int, str]]:
    """The ```python blocks of the notebook section, with the line each starts on."""
    text = DOC.read_text()
    start = text.index(NOTEBOOK)
    end = text.find("\n## ", start + len(NOTEBOOK))
    cells = []
    for match in re.finditer(r"^```python\n(.*?)^```", text[start:end], re.S | re.M):
        line = text.count("\n", 0, start + match.start(1)) + 1
        cells.append((line, match.group(1)))
    return cells


def same(a, b) -> bool:
    """Equal, floats up to the rounding of the same float32 math (tests/tolerances.py)."""
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=FP32_REORDERED["rtol"], abs_tol=FP32_REORDERED["atol"])
    return a == b


def trained(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(SKIP)} for r in records]


def test_the_notebook_runs_and_trains_as_rlgraph_run_does(run_cli, tmp_path, monkeypatch, capsys):
    from safetensors.torch import load_file

    work = tmp_path / "notebook"  # a scratch working directory that sees the repository's specs
    work.mkdir()
    (work / "specs").symlink_to(REPO / "specs")
    monkeypatch.chdir(work)
    cells = notebook_cells()
    assert len(cells) >= 5
    namespace: dict = {}
    for line, source in cells:  # line numbers of a failure are docs/api.md's
        exec(compile("\n" * (line - 1) + source, str(DOC), "exec"), namespace)
    printed = capsys.readouterr().out
    api_dir = work / "runs" / "notebook"

    # the callback saw step 1 and stopped the run there, with a checkpoint; the second call resumed from it
    assert [r["training/global_step"] for r in namespace["seen"]] == [1]
    history = [json.loads(line) for line in (api_dir / "history.jsonl").read_text().splitlines()]
    assert [(h["start"], h["resumed_from_step"]) for h in history] == [("fresh", None), ("resumed", 1)]
    assert "specs/my_grpo.rl:14:16" in printed  # the broken spec's diagnostic names the file it stands for

    code, out = run_cli("specs/grpo_arith.rl", "--output", work / "cli", *fast(steps=2))
    assert code == 0, out
    cli_dir = work / "cli"
    for name in ("plan.json", "overrides.txt", "spec/grpo_arith.rl", "spec/common/arith_base.rl"):
        assert (api_dir / name).read_text() == (cli_dir / name).read_text(), name

    api, cli = trained(read_metrics(api_dir)), trained(read_metrics(cli_dir))
    assert [r["training/global_step"] for r in api] == [r["training/global_step"] for r in cli] == [0, 1, 2]
    for a, c in zip(api, cli):
        assert a.keys() == c.keys()
        different = {k: (a[k], c[k]) for k in a if not same(a[k], c[k])}
        assert not different, f"step {a['training/global_step']}: {different}"
    assert {k: namespace["seen"][0][k] for k in api[1]} == api[1]  # on_step got step 1's line of metrics.jsonl

    # rlgraph.load gave the weights `rlgraph run` trained
    model = namespace["model"]
    expected = {}
    for file in (cli_dir / "checkpoints" / "step_2" / "actor").glob("*.safetensors"):
        expected.update(load_file(file))
    weights = model.state_dict()
    assert expected and set(expected) <= set(weights)
    different = [k for k, v in expected.items() if not torch.allclose(weights[k].float(), v.float(), **FP32_AFTER_UPDATE)]
    assert not different, different[:5]
