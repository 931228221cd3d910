"""A tiny random Llama with a character tokenizer, dataset items in rlgraph.data's shape, and settings factories."""

from __future__ import annotations

import dataclasses

from rlgraph.contract import settings as s

PAD, EOS = 0, 1
ALPHABET = "0123456789+="


def build_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(["<pad>", "</s>", "<unk>", *ALPHABET])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", padding_side="left"
    )


def qwen_style_tokenizer():
    """A word-level tokenizer under a Qwen-style chat template: tool schemas in a system turn when given, a
    `tool` message as a user turn in <tool_response> tags (what Qwen's templates render)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab={"<unk>": 0, "<|im_end|>": 1}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", unk_token="<unk>")
    tokenizer.chat_template = (
        "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|im_end|>\n{% endif %}"
        "{% for m in messages %}"
        "{% if m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n</tool_response><|im_end|>\n"
        "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return tokenizer


def make_items(prompts: list[str], tokenizer, answers: list[str] | None = None) -> list[dict]:
    """Dataset items in rlgraph.data's shape."""
    answers = answers or ["" for _ in prompts]
    return [
        {
            "input_ids": tokenizer(p)["input_ids"],
            "prompt_text": p,
            "data_source": "test/arith",
            "ground_truth": a,
            "extra_info": {"index": i},
            "index": i,
        }
        for i, (p, a) in enumerate(zip(prompts, answers))
    ]


# --- settings: what the Plan would hand the workers, with the values the workers' own defaults had before
# settings moved into the Plan. Each factory takes field overrides; an actor's or critic's optimizer fields
# (lr, betas, weight_decay, warmup_steps, grad_clip) may be given flat. max_new_tokens had no default (5 is
# what most tests ask for); memory_fraction is the spec's default.

_OPTIM_FIELDS = ("lr", "betas", "weight_decay", "warmup_steps", "grad_clip")
_OPTIM = s.OptimSettings(lr=1e-6, betas=(0.9, 0.999), weight_decay=0.0, warmup_steps=0, warmup_ratio=None, grad_clip=1.0,
                        schedule="constant", min_lr_ratio=0.0, decay_steps=None)
_ACTOR = s.ActorSettings(dtype="float32", strategy="ddp", micro_batch=None, micro_batch_tokens=None, entropy_coeff=0.0,
                         optim=_OPTIM, gradient_checkpointing=False, lora=None, param_offload=False,
                         optimizer_offload=False, remove_padding=False)
_CRITIC = s.CriticSettings(dtype="float32", strategy="ddp", micro_batch=None, micro_batch_tokens=None, head="value",
                           optim=dataclasses.replace(_OPTIM, lr=1e-5), gradient_checkpointing=False,
                           param_offload=False, optimizer_offload=False, remove_padding=False)
_REF = s.RefSettings(dtype="float32", strategy="ddp", micro_batch=None, micro_batch_tokens=None, param_offload=False,
                     remove_padding=False)
_REWARD_MODEL = s.RewardModelSettings(dtype="float32", micro_batch=None, micro_batch_tokens=None, retokenize=False,
                                      remove_padding=False)
_ROLLOUT = s.RolloutSettings(engine="hf", n=1, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=5, tp=1,
                             memory_fraction=0.5, max_sequences=None, dtype="float32", val=s.ValSettings(n=1, temperature=0.0, top_p=1.0, top_k=0))
_GENERATE = s.GenerateSettings(n=1, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=5, keep_log_probs=False,
                               env=None)
_LOG_PROB = s.LogProbSettings(temperature=1.0, micro_batch=None, micro_batch_tokens=None)
_FORWARD = s.ForwardSettings(micro_batch=None, micro_batch_tokens=None)
_UPDATE = s.ActorUpdateSettings(epochs=1, minibatch=None, mini_batch_size=None, micro_batch=None,
                                micro_batch_tokens=None, loss_agg="token-mean",
                                clip_low=0.2, clip_high=0.2, clip_c=3.0, kl_coef=0.0, kl_kind="k3",
                                policy_loss="vanilla", entropy_coeff=0.0, temperature=1.0, tis="off", tis_cap=2.0,
                                user_loss=None)
_CRITIC_UPDATE = s.CriticUpdateSettings(epochs=1, minibatch=None, mini_batch_size=None, micro_batch=None,
                                        micro_batch_tokens=None,
                                        loss_agg="token-mean", clip=0.5)


def _with_optim(base, overrides: dict):
    optim = {k: overrides.pop(k) for k in _OPTIM_FIELDS if k in overrides}
    return dataclasses.replace(base, optim=dataclasses.replace(base.optim, **optim), **overrides)


def optim_settings(**overrides) -> s.OptimSettings:
    return dataclasses.replace(_OPTIM, **overrides)


def actor_settings(**overrides) -> s.ActorSettings:
    return _with_optim(_ACTOR, overrides)


def critic_settings(**overrides) -> s.CriticSettings:
    return _with_optim(_CRITIC, overrides)


def ref_settings(**overrides) -> s.RefSettings:
    return dataclasses.replace(_REF, **overrides)


def reward_model_settings(**overrides) -> s.RewardModelSettings:
    return dataclasses.replace(_REWARD_MODEL, **overrides)


def rollout_settings(**overrides) -> s.RolloutSettings:
    return dataclasses.replace(_ROLLOUT, **overrides)


def generate_settings(**overrides) -> s.GenerateSettings:
    """temperature=0: greedy (what `do_sample=False` was)."""
    return dataclasses.replace(_GENERATE, **overrides)


def log_prob_settings(**overrides) -> s.LogProbSettings:
    return dataclasses.replace(_LOG_PROB, **overrides)


def forward_settings(**overrides) -> s.ForwardSettings:
    return dataclasses.replace(_FORWARD, **overrides)


def update_settings(**overrides) -> s.ActorUpdateSettings:
    """An actor update; `mini_batch_size` and `micro_batch` count samples."""
    return dataclasses.replace(_UPDATE, **overrides)


def critic_update_settings(**overrides) -> s.CriticUpdateSettings:
    return dataclasses.replace(_CRITIC_UPDATE, **overrides)


_SFT = s.SftSettings(epochs=1, minibatch=None, mini_batch_size=None, micro_batch=None, micro_batch_tokens=None,
                     loss_agg="token-mean")


def sft_settings(**overrides) -> s.SftSettings:
    """An actor's supervised step; `mini_batch_size` and `micro_batch` count demonstrations."""
    return dataclasses.replace(_SFT, **overrides)


def demonstration_items(prompts: list[str], responses: list[str], tokenizer) -> list[dict]:
    """Dataset items of SFT rows (RLDataset with demonstrations): the response's tokens and EOS."""
    return [item | {"response_ids": tokenizer(r, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id],
                    "response_text": r, "pad_token_id": tokenizer.pad_token_id}
            for item, r in zip(make_items(prompts, tokenizer, responses), responses)]
