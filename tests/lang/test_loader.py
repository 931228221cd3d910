"""rlgraph/lang/loader.py: includes, the merge rule, headers and duplicates."""

from __future__ import annotations

from pathlib import Path

from rlgraph.lang import ast
from rlgraph.lang.loader import load


def write(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def values(block: ast.Block) -> dict:
    out = {}
    for entry in block.entries:
        if isinstance(entry, ast.Block):
            out[entry.keyword] = values(entry)
        else:
            out[entry.key] = getattr(entry.value, "text", getattr(entry.value, "value", None))
    return out


def blocks(loaded) -> dict:
    return {(b.keyword, b.name): values(b) for b in loaded.blocks}


def codes(loaded) -> list[str]:
    return sorted(d.code for d in loaded.diagnostics)


def test_include_is_relative_to_the_including_file_and_merges_key_by_key(tmp_path):
    write(tmp_path, "common/base.rl", 'rlgraph 1\n'
          'role actor { model = policy  pool = main  optim { lr = 1  weight_decay = 0.1 } }\n'
          'data { train = "a"  batch_size = 8 }\n')
    main = write(tmp_path, "main.rl", 'rlgraph 1\ninclude "common/base.rl"\nrole actor { optim { lr = 2 } }\n'
                 'data { batch_size = 16 }\n')
    loaded = load(main)
    assert codes(loaded) == []
    assert blocks(loaded) == {
        ("role", "actor"): {"model": "policy", "pool": "main", "optim": {"lr": "2", "weight_decay": "0.1"}},
        ("data", None): {"train": "a", "batch_size": "16"},
    }


def test_an_include_expands_in_place(tmp_path):
    write(tmp_path, "base.rl", 'rlgraph 1\ntrain { steps = 5  seed = 1 }\ndata { train = "a"  batch_size = 8 }\n')
    main = write(tmp_path, "main.rl", 'rlgraph 1\ntrain { steps = 1 }\ninclude "base.rl"\ndata { batch_size = 2 }\n')
    loaded = load(main)
    assert codes(loaded) == []
    assert blocks(loaded) == {("train", None): {"steps": "5", "seed": "1"},  # before the include: overridden
                              ("data", None): {"train": "a", "batch_size": "2"}}  # after it: overrides


def test_a_later_step_replaces_an_earlier_one(tmp_path):
    write(tmp_path, "base.rl", "rlgraph 1\nstep {\n  a -> f -> b\n  b -> g -> c\n}\n")
    main = write(tmp_path, "main.rl", 'rlgraph 1\ninclude "base.rl"\nstep {\n  a -> h -> b\n}\n')
    step = load(main).step
    assert [s.call.label for s in step.statements] == ["h"]


def test_the_same_block_twice_in_one_file_is_a_duplicate(tmp_path):
    main = write(tmp_path, "main.rl", "rlgraph 1\ntrain { steps = 1 }\ntrain { steps = 2  steps = 3 }\n"
                 "step {\n}\nstep {\n}\n")
    loaded = load(main)
    assert codes(loaded) == ["duplicate-name"] * 3


def test_an_included_file_needs_its_own_header(tmp_path):
    write(tmp_path, "base.rl", "train { steps = 5 }\n")
    main = write(tmp_path, "main.rl", 'rlgraph 1\ninclude "base.rl"\n')
    (problem,) = load(main).diagnostics
    assert problem.code == "missing-header" and problem.span.file.endswith("base.rl")


def test_bad_include_and_cycle(tmp_path):
    write(tmp_path, "a.rl", 'rlgraph 1\ninclude "b.rl"\ninclude "missing.rl"\n')
    write(tmp_path, "b.rl", 'rlgraph 1\ninclude "a.rl"\n')
    loaded = load(str(tmp_path / "a.rl"))
    assert codes(loaded) == ["bad-include", "include-cycle"]
    cycle = next(d for d in loaded.diagnostics if d.code == "include-cycle")
    assert cycle.span.file.endswith("b.rl") and cycle.message.count("->") == 2


def test_a_file_including_itself(tmp_path):
    main = write(tmp_path, "a.rl", 'rlgraph 1\ninclude "a.rl"\n')
    assert codes(load(main)) == ["include-cycle"]


def test_unreadable_and_binary_files(tmp_path):
    assert codes(load(str(tmp_path / "nope.rl"))) == ["io"]
    (tmp_path / "bin.rl").write_bytes(b"rlgraph 1\n\xff\xfe")
    assert codes(load(str(tmp_path / "bin.rl"))) == ["encoding"]
