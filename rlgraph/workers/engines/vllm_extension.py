"""The worker extension of the vllm engine (`LLM(worker_extension_cls=...)`): methods that vLLM adds to its
worker and that `LLM.collective_rpc` reaches. Imported by vLLM inside its worker, so it imports nothing."""

from __future__ import annotations


class WeightReload:
    def rlgraph_reload_weights(self, weights: list) -> None:
        """Load (name, tensor) pairs in the checkpoint's names in place. `reload_weights` re-runs vLLM's processing
        of each layer after loading (on CPU the GEMM packing that drops the plain weight), which
        `model.load_weights` alone does not; `is_checkpoint_format`: the names and layout of the HF checkpoint."""
        self.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
