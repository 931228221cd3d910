"""The built-in models' tokenizer: one token per character, loadable with plain AutoTokenizer.

It is a `tokenizers` WordLevel model over single characters (a regex pre-tokenizer splits the text
into characters, a Fuse decoder joins them back), wrapped in PreTrainedTokenizerFast, so
`AutoTokenizer.from_pretrained(folder)` needs no custom code.

- `tokenizer("12+34=")["input_ids"]` is one id per character: no BOS or EOS is added. The training
  sequence of a sample is prompt + answer + EOS; generation stops at EOS.
- Special tokens: `<pad>` 0, `<s>` 1 (BOS, defined but never added), `</s>` 2 (EOS), `<unk>` 3
  (any character outside the alphabet).
- Padding is on the left, as generation needs. There is no chat template.
- `added_tokens` (e.g. the tool-call tags `<tool_call>` ...) become one id each, after the alphabet.
  They are added tokens but not special ones (as Qwen's `<tool_call>` is), so a decode keeps them
  whether or not it skips special tokens.
- Saved with `save_char_tokenizer`: class name PreTrainedTokenizerFast, which transformers 4.x knows
  too (5.x writes its own TokenizersBackend).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
ALPHABET = "0123456789+-*/=()., " + "abcdefghijklmnopqrstuvwxyz"


def build_char_tokenizer(added_tokens: Sequence[str] = ()) -> Any:
    """A fresh PreTrainedTokenizerFast over SPECIAL_TOKENS + ALPHABET + `added_tokens` (in that id order)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKENS, *ALPHABET])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=64,
    )
    if added_tokens:
        tokenizer.add_tokens([AddedToken(token, special=False, normalized=False) for token in added_tokens])
    return tokenizer


def save_char_tokenizer(tokenizer: Any, out: str | Path) -> None:
    """save_pretrained, naming the class PreTrainedTokenizerFast rather than transformers 5's
    TokenizersBackend, so that transformers 4.x (in an sglang or vLLM image, say) loads it too."""
    tokenizer.save_pretrained(out)
    config_path = Path(out) / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def load_tokenizer(folder: str | Path) -> Any:
    """`AutoTokenizer.from_pretrained(folder)`, without importing AutoTokenizer for a shipped built-in model.

    AutoTokenizer pulls transformers' configuration and auto-model modules, and through them torch (about 2.5 s
    of CPU); PreTrainedTokenizerFast alone needs neither (about 0.9 s). The short way is taken only for a folder
    under rlgraph/models/weights whose tokenizer_config.json names PreTrainedTokenizerFast (as
    `save_char_tokenizer` writes it) and maps no remote code: the built-ins' files are pinned by sha256
    (registry.verified_builtin_folder), and tests/models/test_char_tokenizer.py checks that AutoTokenizer gives
    the same class and the same ids for every one of them. Any other folder goes to AutoTokenizer."""
    if _is_shipped_char_tokenizer(Path(folder)):
        from transformers import PreTrainedTokenizerFast

        return PreTrainedTokenizerFast.from_pretrained(str(folder))
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def _is_shipped_char_tokenizer(folder: Path) -> bool:
    from rlgraph.models.registry import WEIGHTS_DIR

    try:
        if folder.resolve().parent != WEIGHTS_DIR or not (folder / "tokenizer.json").is_file():
            return False
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return False
    return (isinstance(config, dict) and config.get("tokenizer_class") == "PreTrainedTokenizerFast"
            and "auto_map" not in config)
