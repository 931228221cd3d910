"""GPU housekeeping that the workers share; every function is a no-op on the CPU.

- `free_cached_memory`: a colocated actor generates, then trains, on one GPU. The caching allocator
  keeps generation's KV-cache blocks reserved unless they are handed back, and training's activations
  then fragment around them; verl empties the cache at the same switch.
- `make_deterministic`: a resumed run repeats bit for bit only with deterministic kernels (cuBLAS
  needs its workspace fixed before its first call, so this runs before a worker touches the GPU).
  CPU kernels are deterministic already.
- `indexed_device`: `torch.cuda.set_device` (and a process's own device choice) needs an index; a bare
  "cuda" means this process's first visible GPU.
- `make_current`: a process that sees several GPUs (the host of a tp engine) makes its own the current one,
  so that nothing called without a device lands on another.
"""

from __future__ import annotations

import os

import torch

CUBLAS_WORKSPACE = ":4096:8"  # what torch's reproducibility notes ask for deterministic cuBLAS


def indexed_device(device: str | torch.device) -> torch.device:
    """The device with its index: "cuda" -> cuda:0, the first GPU this process sees; others as given.

    Pure (touches no CUDA context): a process that sees several GPUs picks its own index beforehand."""
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", 0)
    return device


def make_current(device: str | torch.device | None) -> None:
    """Make a CUDA device this process's current one (before anything uses CUDA); nothing for another device or
    where torch has no CUDA (a simulated GPU: the worker built on the device then says what is wrong)."""
    if device is None or torch.device(device).type != "cuda" or not torch.cuda.is_available():
        return
    torch.cuda.set_device(indexed_device(device))


def free_cached_memory(device: torch.device) -> bool:
    """Return the allocator's cached blocks on a CUDA device to the driver; whether it did anything."""
    if device.type != "cuda":
        return False
    torch.cuda.empty_cache()
    return True


def make_deterministic() -> None:
    """Deterministic kernels for this process (warn, not fail, on an op that has none)."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
