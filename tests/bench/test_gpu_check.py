"""bench/gpu_check.py stays runnable: its CPU mode runs every check on a tiny model of the same code paths.

The script exists for a GPU machine (no Ray there); this keeps it from rotting between GPU sessions. The
figures themselves (peaks, throughput) mean something only on a GPU and are not judged here."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_gpu_check_passes_every_check_in_cpu_mode(tmp_path):
    out = tmp_path / "gpu_check.json"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--device", "cpu", "--shape", "tiny",
                           "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["failed"] == []
    checks = result["checks"]
    assert set(checks) == {"mixed_precision", "generate", "log_prob", "update", "fp16_refused",
                           "gradient_checkpointing", "weight_sync", "fsdp_one_rank", "plan_vs_measured",
                           "bf16_compute", "lora", "remove_padding", "optimizer_offload", "param_offload",
                           "release_resume", "resume"}
    assert checks["bf16_compute"]["update"] == ["torch.bfloat16"]  # the default dtype, on a CPU too
    assert checks["lora"]["adapters_moved"] > 0 and checks["optimizer_offload"]["moments_on"] == ["cpu"]
    assert checks["param_offload"]["skipped"] == "FSDP2's CPU offload gathers to a GPU"
    assert checks["update"]["adam_dtypes"] == ["torch.float32"]
    assert checks["gradient_checkpointing"]["block_forwards_on"] == 2 * checks["gradient_checkpointing"]["block_forwards_off"]
    assert checks["plan_vs_measured"]["plan_gib"] > 0
    # on a CPU the peaks are the resident set's, so the plan's column has a measured one beside it
    assert checks["update"]["steady_peak_gib"] > 0 and checks["plan_vs_measured"]["plan_over_measured"] > 0
    assert result["info"]["ray_imported"] is False


def test_the_default_cuda_device_gets_the_index_that_set_device_needs():
    """On a GPU the script's default is "cuda"; torch.cuda.set_device refuses a device without an index
    (the check died before its first line), so the script normalises it first."""
    import pytest
    import torch
    from torch.cuda._utils import _get_device_index  # what torch.cuda.set_device calls on its argument

    from rlgraph.workers.cuda import indexed_device

    with pytest.raises(ValueError, match="specified index"):
        _get_device_index(torch.device("cuda"))
    assert _get_device_index(indexed_device("cuda")) == 0
    assert indexed_device("cuda") == torch.device("cuda", 0)
    assert indexed_device("cuda:3") == torch.device("cuda", 3)
    assert indexed_device("cpu") == torch.device("cpu")
