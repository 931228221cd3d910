"""`rlgraph export RUN_DIR|CHECKPOINT --out DIR`: a trained policy as a plain Hugging Face model folder.

SOURCE is a run directory (its newest checkpoint), one checkpoint (`RUN_DIR/checkpoints/step_<N>`) or a
role's folder in one. LoRA adapters are merged into their base, a full fine-tuning checkpoint is copied
(rlgraph/runtime/export.py, which `rlgraph.load` shares). Either way DIR gets the model and its tokenizer,
and `AutoModelForCausalLM.from_pretrained(DIR)` loads it with no peft and no rlgraph.

Exit codes: 0 written, 1 nothing to export (the message says why).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rlgraph.runtime.export import ExportError, export, role_folder

EXIT_OK, EXIT_ERRORS = 0, 1


def export_command(source: str, out: str, role: str | None = None, base: str | None = None) -> int:
    try:
        folder, what = role_folder(Path(source), role)
        written = export(folder, Path(out), base=base)
    except ExportError as err:
        sys.stderr.write(f"error: {err}\n")
        return EXIT_ERRORS
    print(f"exported {what}{written} to {out}")
    return EXIT_OK
