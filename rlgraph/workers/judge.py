"""The LLM judge worker: a model that generates a verdict on each sample, parsed into the sample's score.

For each row of the rollout the judge's template (rlgraph/contract/judge.py) is rendered over the sample's
prompt, response and ground truth, encoded as a prompt of the judge's own model (through its chat template
when it has one: `encode_prompt`, as the data's prompts are), and the engine (hf, vllm, ...: any rollout
engine) generates the verdict. The parser turns it into a number on the row's `reward_index` column of a
(batch, R) tensor, the shape every reward produces. A verdict that holds no score is NaN there: up to
`max_invalid_fraction` of a batch may be (the step leaves those rows out of the update,
rlgraph/runtime/transforms.py), more is a JudgeVerdictError naming the first such row and its verdict.

The judge reads text, never the policy's token ids, so its model may be of any family. Its weights never
change: nothing syncs into it. Its engine keeps its memory for the whole run, colocated too (the runtime puts
only rollouts' engines to sleep while the trainer runs); the plan counts it so (rlgraph/plan/memory.py).
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable

import torch

from rlgraph.contract.judge import JudgeVerdictError, as_verdict_score, builtin_parser, compile_template, render
from rlgraph.contract.settings import JudgeSettings, NoSettings
from rlgraph.workers.batch import Rollout
from rlgraph.workers.engines import SamplingParams, engine_class

_SHOWN_ROWS = 5  # rows an error lists by index before `...`


def load_parser(parser: str, base_dir: str | None) -> Callable[..., Any]:
    """The parser `parser` names: a built-in one, or a user function loaded as a reward function is
    (RewardFunctionError when it cannot be; JudgeVerdictError when it cannot take a verdict's four arguments)."""
    builtin = builtin_parser(parser)
    if builtin is not None:
        return builtin
    from rlgraph.workers.reward_process import load_reward_fn

    fn = load_reward_fn(parser, base_dir, kind="judge parser")
    try:
        inspect.signature(fn).bind("verdict", "prompt", "response", "ground_truth")
    except TypeError:
        raise JudgeVerdictError(f"judge parser {parser!r} must take (verdict, prompt, response, ground_truth)") \
            from None
    except ValueError:  # a callable without a signature (a C builtin): its first call will tell
        pass
    return fn


class JudgeWorker:
    """`score(rollout)` -> (batch, R) float32: each row's parsed verdict on its `reward_index` column."""

    def __init__(self, model_path: str, settings: JudgeSettings, *, seed: int, device: str | None = None,
                 deterministic: bool = False) -> None:
        self.settings = settings
        self.template = compile_template(settings.template)  # `check` compiled it too; here once per run
        self.parse = load_parser(settings.parser, settings.base_dir)
        self.engine = engine_class(settings.engine).from_pretrained(
            model_path, dtype=settings.dtype, device=device, memory_fraction=settings.memory_fraction, tp=1,
            max_sequences=settings.max_sequences, deterministic=deterministic)
        self.tokenizer = self.engine.tokenizer
        self.generator = torch.Generator().manual_seed(seed)  # a sampling judge's seed per call

    def prompt(self, rollout: Rollout, row: int) -> str:
        """Row `row`'s judge prompt, as text (before the judge model's chat template)."""
        return render(self.template, prompt=rollout.prompt_text[row], response=rollout.response_text[row],
                      ground_truth=rollout.ground_truth[row], data_source=rollout.data_source[row],
                      extra_info=rollout.extra_info[row])

    def verdicts(self, rollout: Rollout) -> list[str]:
        """What the judge model says of each row: its generated text, special tokens left out."""
        from rlgraph.data.dataset import encode_prompt

        s = self.settings
        prompt_ids = [encode_prompt(self.tokenizer, self.prompt(rollout, row))[0] for row in range(len(rollout))]
        sampling = SamplingParams(max_new_tokens=s.max_new_tokens, temperature=s.temperature)
        seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
        generation = self.engine.generate(prompt_ids, 1, sampling, seed=seed)
        return self.tokenizer.batch_decode(generation.token_ids, skip_special_tokens=True)

    @torch.no_grad()
    def score(self, rollout: Rollout, *, settings: NoSettings) -> torch.Tensor:
        del settings  # how a judge generates is its role's settings
        verdicts = self.verdicts(rollout)
        scores = [self._parse_row(rollout, row, verdict) for row, verdict in enumerate(verdicts)]
        self._check_invalid(rollout, verdicts, [row for row, score in enumerate(scores) if score is None])
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

    def _check_invalid(self, rollout: Rollout, verdicts: list[str], invalid: list[int]) -> None:
        """JudgeVerdictError when more rows hold no score than max_invalid_fraction allows: the first of them,
        what it was asked and what the judge said, and the three ways out."""
        fraction = self.settings.max_invalid_fraction
        allowed = int(fraction * len(rollout))
        if len(invalid) <= allowed:
            return
        row = invalid[0]
        rows = ", ".join(map(str, invalid[:_SHOWN_ROWS])) + (", ..." if len(invalid) > _SHOWN_ROWS else "")
        raise JudgeVerdictError(
            f"{len(invalid)} of {len(rollout)} verdicts hold no score for parser `{self.settings.parser}` (rows "
            f"{rows}); max_invalid_fraction = {fraction:g} allows {allowed}. The first, row {row} (uid="
            f"{rollout.uid[row]}): prompt {rollout.prompt_text[row]!r}, response {rollout.response_text[row]!r}; "
            f"the judge was asked {self.prompt(rollout, row)!r} and said {verdicts[row]!r}. Make the template ask "
            "for the form the parser reads, raise the judge's max_new_tokens if its verdicts are cut, or raise "
            "`max_invalid_fraction` in the judge's block to leave up to that share of a batch's rows out of the "
            "update")
