"""The LLM judge worker: a model that generates a verdict on each sample, parsed into the sample's score.

For each row of the rollout the judge's template (rlgraph/contract/judge.py) is rendered over the sample's
prompt, response and ground truth, encoded as a prompt of the judge's own model (through its chat template
when it has one: `encode_prompt`, as the data's prompts are), and the engine (hf, vllm, ...: any rollout
engine) generates the verdict. The parser turns it into a number on the row's `reward_index` column of a
(batch, R) tensor, the shape every reward produces. A verdict that holds no score is NaN there: up to
`max_invalid_fraction` of a batch may be (the step leaves those rows out of the update,
rlgraph/runtime/transforms.py), more is a JudgeVerdictError naming the first such row and its verdict.

The judge reads text, never the policy's token ids, so its model may be of any family.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rlgraph.contract.judge import as_verdict_score, builtin_parser, compile_template, render
from rlgraph.contract.settings import ForwardSettings, JudgeSettings
from rlgraph.workers.batch import Rollout
from rlgraph.workers.engines import SamplingParams, engine_class


class JudgeVerdictError(Exception):
    """More verdicts than `max_invalid_fraction` allows hold no score, or the parser raised: a user's error
    (the template, the parser, the judge model), said without a traceback."""


def load_parser(parser: str, base_dir: str | None) -> Any:
    """The parser `parser` names: a built-in one, or a user function loaded as a reward function is."""
    builtin = builtin_parser(parser)
    if builtin is not None:
        return builtin
    import inspect

    from rlgraph.workers.reward_process import load_reward_fn

    fn = load_reward_fn(parser, base_dir, kind="judge parser")
    try:
        inspect.signature(fn).bind("verdict", "prompt", "response", "ground_truth")
    except TypeError:
        raise JudgeVerdictError(f"judge parser {parser!r} must take (verdict, prompt, response, ground_truth)") \
            from None
    except ValueError:  # a builtin without a signature: the call will tell
        pass
    return fn


class JudgeWorker:
    """`score(rollout)` -> (batch, R) float32: each row's parsed verdict on its `reward_index` column."""

    def __init__(self, model_path: str, settings: JudgeSettings, *, seed: int, device: str | None = None,
                 deterministic: bool = False) -> None:
        self.settings = settings
        self.template = compile_template(settings.template)  # planning checked it; compiled once here
        self.parse = load_parser(settings.parser, settings.base_dir)
        self.engine = engine_class(settings.engine).from_pretrained(
            model_path, dtype=settings.dtype, device=device, memory_fraction=settings.memory_fraction, tp=1,
            max_sequences=settings.max_sequences, deterministic=deterministic)
        self.tokenizer = self.engine.tokenizer
        self.generator = torch.Generator().manual_seed(seed)
        self.last_verdicts: list[str] = []  # the latest batch's verdicts, for a look at what the judge said

    def prompts(self, rollout: Rollout) -> list[list[int]]:
        """Each row's judge prompt, in the judge model's tokens."""
        from rlgraph.data.dataset import encode_prompt

        return [encode_prompt(self.tokenizer, self.render_row(rollout, i))[0] for i in range(len(rollout))]

    def render_row(self, rollout: Rollout, row: int) -> str:
        return render(self.template, prompt=rollout.prompt_text[row], response=rollout.response_text[row],
                      ground_truth=rollout.ground_truth[row], data_source=rollout.data_source[row],
                      extra_info=rollout.extra_info[row])

    def verdicts(self, rollout: Rollout) -> list[str]:
        s = self.settings
        sampling = SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature)
        seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        generation = self.engine.generate(self.prompts(rollout), 1, sampling, seed=seed,
                                          max_sequences=s.max_sequences)
        return self.tokenizer.batch_decode(generation.token_ids, skip_special_tokens=True)

    @torch.no_grad()
    def score(self, rollout: Rollout, *, settings: ForwardSettings) -> torch.Tensor:
        del settings  # a judge generates: its batching is its role's max_sequences
        verdicts = self.verdicts(rollout)
        self.last_verdicts = verdicts
        scores = [self._parse_row(rollout, row, verdict) for row, verdict in enumerate(verdicts)]
        invalid = [row for row, score in enumerate(scores) if score is None]
        allowed = self.settings.max_invalid_fraction * len(rollout)
        if len(invalid) > allowed:
            row = invalid[0]
            raise JudgeVerdictError(
                f"{len(invalid)} of {len(rollout)} verdicts hold no score for parser `{self.settings.parser}` "
                f"(rows {', '.join(map(str, invalid[:5]))}{', ...' if len(invalid) > 5 else ''}); the first, row "
                f"{row} (uid={rollout.uid[row]}, prompt={rollout.prompt_text[row]!r}, response="
                f"{rollout.response_text[row]!r}): the judge said {verdicts[row]!r}. max_invalid_fraction = "
                f"{self.settings.max_invalid_fraction:g} allows {int(allowed)}: make the template ask for the form "
                "the parser reads, raise the judge's max_new_tokens if its verdicts are cut, or raise "
                "`max_invalid_fraction` in the judge's block to leave up to that share of a batch's rows out of "
                "the update")
        values = [math.nan if score is None else score for score in scores]
        if rollout.episodes is not None:  # a sample whose environment failed gets no reward (and no loss)
            values = [0.0 if episode.failed else v for v, episode in zip(values, rollout.episodes)]
        token_level = torch.zeros(rollout.responses.shape, dtype=torch.float32)  # (batch, R)
        token_level[torch.arange(len(rollout)), rollout.reward_index.cpu()] = torch.tensor(values, dtype=torch.float32)
        return token_level

    def _parse_row(self, rollout: Rollout, row: int, verdict: str) -> float | None:
        try:
            value = self.parse(verdict, rollout.prompt_text[row], rollout.response_text[row],
                               rollout.ground_truth[row])
        except Exception as err:
            raise JudgeVerdictError(f"judge parser `{self.settings.parser}` raised {type(err).__name__}: {err} on "
                                    f"row {row} (uid={rollout.uid[row]}), whose verdict was {verdict!r}") from None
        return as_verdict_score(value)

    # the weights never change: nothing to sync, and memory stays put between calls
    def release_memory(self) -> None:
        self.engine.release_memory()

    def resume_memory(self) -> None:
        self.engine.resume_memory()
