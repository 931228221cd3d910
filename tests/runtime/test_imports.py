"""The runtime consumes a Plan: it never imports the parser or the compiler (DESIGN: one direction)."""

import subprocess
import sys


def test_runtime_imports_neither_spec_nor_compiler():
    code = (
        "import sys, rlgraph.runtime.loop, rlgraph.runtime.run\n"
        "bad = sorted(m for m in sys.modules if m.startswith(('rlgraph.lang', 'rlgraph.compiler')))\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_importing_the_error_classes_is_cheap():
    code = "import sys, rlgraph.runtime\nassert not {'torch', 'ray'} & set(sys.modules), sorted(sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_run_plan_starts_ray_before_torch_and_transformers_load():
    # run_plan starts Ray in the calling thread while a second one imports torch and transformers and
    # pre-flights: importing it must load neither, or Ray's start would wait for them
    code = ("import sys\nfrom rlgraph.runtime import run_plan\n"
            "assert not {'torch', 'transformers'} & set(sys.modules), sorted(sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
