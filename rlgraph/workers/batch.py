"""The batch that flows between workers: generated samples, one row per sample.

Rows of one prompt sit next to each other (verl's interleaved repeat), and `uid` names the prompt a row
came from, so group-wise advantages (GRPO, RLOO) can find the groups. A `Rollout` is a plain dataclass of
tensors and lists: it pickles compactly (see `__reduce__`), so it can go through Ray inline.

A row is its prompt (left-padded) and its response (right-padded), and a response may hold several
segments: the model's turns, and tokens an environment inserted between them (a tool's output, a user
turn). Three things are kept apart, as verl keeps them:

- `attention_mask` (batch, P + R): the tokens the model sees: the prompt and every segment;
- `loss_mask` (batch, R): the response tokens trained on and counted in losses, advantages and metrics,
  by default the model's own tokens (verl calls this mask `response_mask`, and so do `rlgraph.algos`);
- `reward_index` (batch,): the response column a sample's reward sits on, by default its last loss token.

`token_source` says where each response column came from (`TokenSource`) and `segments(row)` lists a row's
turns. A single-turn rollout is one model segment: all three masks are then "up to and including EOS".
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

import torch

from rlgraph.models.sequences import position_ids_from_mask  # noqa: F401 (re-exported)

TENSOR_FIELDS = ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "loss_mask", "token_source",
                 "reward_index", "policy_version")
LIST_FIELDS = ("uid", "data_source", "ground_truth", "extra_info", "prompt_text", "response_text")


class TokenSource(enum.IntEnum):
    """Where a response column's token came from (`Rollout.token_source`, stored as int8)."""

    PAD = 0  # not part of the sample: the right padding after its last token
    MODEL = 1  # sampled by the policy
    ENV = 2  # inserted by an environment between model turns: attended to, not sampled, not trained on


@dataclass(frozen=True)
class EpisodeSummary:
    """What one sample's episode with an environment did (`generate(env = ...)`, rlgraph/workers/episodes.py)."""

    turns: int  # model turns
    tool_calls: int  # calls the model made, well-formed or not
    tool_errors: int  # malformed calls and calls the environment answered with an error
    model_tokens: int  # response tokens the model sampled
    env_tokens: int  # response tokens the environment inserted
    env_reward: float  # the environment's last reward
    failure: str | None = None  # "kind: message" when the environment failed the sample (it trains nothing)

    @property
    def failed(self) -> bool:
        return self.failure is not None

    def to_json(self) -> dict[str, Any]:
        """The fields and `failed`, as samples.jsonl shows an episode."""
        return dataclasses.asdict(self) | {"failed": self.failed}


class Segment(NamedTuple):
    """A run of response columns [start, stop) of one source."""

    source: TokenSource
    start: int
    stop: int


@dataclass
class Rollout:
    """Generated samples. P = prompt columns, R = response columns (= max_new_tokens for one turn)."""

    prompts: torch.Tensor  # (batch, P) left-padded with the pad id
    responses: torch.Tensor  # (batch, R) right-padded with the pad id
    input_ids: torch.Tensor  # (batch, P + R) = cat(prompts, responses)
    attention_mask: torch.Tensor  # (batch, P + R) = cat(prompt mask, token_source != PAD), long
    position_ids: torch.Tensor  # (batch, P + R) = cumsum(attention_mask) - 1, clamped at 0
    loss_mask: torch.Tensor  # (batch, R) long, 1 on the response tokens trained on
    token_source: torch.Tensor  # (batch, R) int8 TokenSource of each response column
    reward_index: torch.Tensor  # (batch,) long, the response column the sample's reward sits on
    policy_version: torch.Tensor  # (batch,) long, the version of the weights that sampled the row (their updates)
    uid: list[int]  # group id of each row: the prompt's index in the generate call (+ uid_offset)
    data_source: list[str]
    ground_truth: list[Any]
    extra_info: list[Any]
    prompt_text: list[str]
    response_text: list[str]  # decoded without special tokens, cut at EOS
    pad_token_id: int = 0  # fills the padded columns; kept so `concat` can re-pad
    # (batch, R) float32 log-probs of the sampled tokens under the weights that sampled them (T applied),
    # 0 where nothing was sampled; kept by `generate(with_log_probs=True)` so the step need not recompute them
    sample_log_probs: torch.Tensor | None = None
    # per row, what its episode with an environment did (`generate(env = ...)`); None: one turn
    episodes: list[EpisodeSummary] | None = None
    # seconds the generation of these rows waited on its environment: a row subset keeps its batch's figure,
    # `concat` adds those of its parts (several generations); 0 for one turn
    env_seconds: float = 0.0

    def __post_init__(self) -> None:
        batch = self.prompts.shape[0]
        for name in TENSOR_FIELDS + LIST_FIELDS:
            if len(getattr(self, name)) != batch:
                raise ValueError(f"Rollout.{name} has {len(getattr(self, name))} rows, prompts has {batch}")
        if self.episodes is not None and len(self.episodes) != batch:
            raise ValueError(f"Rollout.episodes has {len(self.episodes)} rows, prompts has {batch}")
        for name in ("loss_mask", "token_source"):
            if getattr(self, name).shape != self.responses.shape:
                raise ValueError(f"Rollout.{name} has shape {tuple(getattr(self, name).shape)}, "
                                 f"responses {tuple(self.responses.shape)}")

    @property
    def response_mask(self) -> torch.Tensor:
        """verl's name for `loss_mask` (the response tokens trained on), what `rlgraph.algos` takes as
        `response_mask`. It is not the response half of the attention mask once environments insert tokens."""
        return self.loss_mask

    @property
    def prompt_length(self) -> int:
        return self.prompts.shape[1]

    @property
    def response_length(self) -> int:
        return self.responses.shape[1]

    def __len__(self) -> int:
        return self.prompts.shape[0]

    def segments(self, row: int) -> list[Segment]:
        """The response of `row` as runs of one source, in column order; padding is left out."""
        runs: list[Segment] = []
        for column, source in enumerate(self.token_source[row].tolist()):
            if source == TokenSource.PAD:
                continue
            if runs and runs[-1].source == source and runs[-1].stop == column:
                runs[-1] = runs[-1]._replace(stop=column + 1)
            else:
                runs.append(Segment(TokenSource(source), column, column + 1))
        return runs

    def select(self, indices: Sequence[int] | torch.Tensor) -> Rollout:
        """The rows at `indices`, in that order."""
        index = torch.as_tensor(indices, dtype=torch.long)
        rows = index.tolist()
        fields = {name: getattr(self, name)[index.to(getattr(self, name).device)] for name in TENSOR_FIELDS}
        fields.update({name: [getattr(self, name)[i] for i in rows] for name in LIST_FIELDS})
        log_probs = None if self.sample_log_probs is None else self.sample_log_probs[index]
        episodes = None if self.episodes is None else [self.episodes[i] for i in rows]
        return Rollout(**fields, pad_token_id=self.pad_token_id, sample_log_probs=log_probs, episodes=episodes,
                       env_seconds=self.env_seconds)

    def split(self, k: int) -> list[Rollout]:
        """`k` equal contiguous chunks (one per data-parallel rank)."""
        if k <= 0 or len(self) % k:
            raise ValueError(f"cannot split a rollout of {len(self)} rows into {k} equal chunks")
        size = len(self) // k
        return [self.select(range(i * size, (i + 1) * size)) for i in range(k)]

    @classmethod
    def concat(cls, parts: Sequence[Rollout]) -> Rollout:
        """Rows of `parts` one after the other; prompts and responses are re-padded to the widest part."""
        if not parts:
            raise ValueError("Rollout.concat needs at least one rollout")
        if len(parts) == 1:
            return parts[0]
        pad_id = parts[0].pad_token_id
        prompt_len = max(p.prompt_length for p in parts)
        response_len = max(p.response_length for p in parts)

        def response_columns(name: str, value: int) -> torch.Tensor:
            return torch.cat([_pad_columns(getattr(p, name), response_len, value, left=False) for p in parts])

        prompts = torch.cat([_pad_columns(p.prompts, prompt_len, pad_id, left=True) for p in parts])
        prompt_mask = torch.cat(
            [_pad_columns(p.attention_mask[:, : p.prompt_length], prompt_len, 0, left=True) for p in parts]
        )
        lists = {name: [x for p in parts for x in getattr(p, name)] for name in LIST_FIELDS}
        joined = cls.build(
            prompts, prompt_mask, response_columns("responses", pad_id), response_columns("loss_mask", 0), pad_id,
            token_source=response_columns("token_source", TokenSource.PAD),
            reward_index=torch.cat([p.reward_index for p in parts]),  # right padding keeps the columns
            policy_version=torch.cat([p.policy_version for p in parts]),
            **lists,
        )
        if all(p.sample_log_probs is not None for p in parts):
            joined.sample_log_probs = response_columns("sample_log_probs", 0)
        if all(p.episodes is not None for p in parts):
            joined.episodes = [e for p in parts for e in p.episodes]
        joined.env_seconds = sum(p.env_seconds for p in parts)
        return joined

    @classmethod
    def build(
        cls,
        prompts: torch.Tensor,
        prompt_mask: torch.Tensor,
        responses: torch.Tensor,
        response_mask: torch.Tensor | None,
        pad_token_id: int,
        *,
        token_source: torch.Tensor | None = None,
        reward_index: torch.Tensor | None = None,
        policy_version: int | torch.Tensor = 0,
        **lists: list,
    ) -> Rollout:
        """Derive input_ids, attention_mask, position_ids and the defaults from the prompt and response halves.

        response_mask: (batch, R) the loss mask (verl's `response_mask`). For one model turn, 1 up to and
            including EOS. None: the model's tokens of `token_source`.
        token_source: (batch, R) a TokenSource per column. Default: MODEL where `response_mask` is set, PAD
            elsewhere (one model turn). The response half of the attention mask is `token_source != PAD`.
        reward_index: (batch,) the column each sample's reward sits on. Default: its last loss-mask column
            (0 for a row without one).
        policy_version: the version of the weights that sampled the rows (how many updates they had): one int,
            or (batch,).
        """
        if token_source is None:
            if response_mask is None:
                raise ValueError("Rollout.build needs a response_mask or a token_source")
            token_source = _model_turn(response_mask)
        elif token_source.shape != responses.shape:
            raise ValueError(f"token_source has shape {tuple(token_source.shape)}, responses {tuple(responses.shape)}")
        token_source = token_source.to(torch.int8)
        attended = token_source != TokenSource.PAD  # (batch, R)
        if response_mask is None:
            response_mask = token_source == TokenSource.MODEL
        loss_mask = response_mask.long()
        if (loss_mask.bool() & ~attended).any():
            row, column = (loss_mask.bool() & ~attended).nonzero()[0].tolist()
            raise ValueError(f"the loss mask sets row {row}, column {column}, which token_source marks as padding")
        if reward_index is None:
            reward_index = last_index(loss_mask)
        reward_index = reward_index.long()
        if len(reward_index) and not (0 <= int(reward_index.min()) and int(reward_index.max()) < responses.shape[1]):
            raise ValueError(f"reward_index must lie in [0, {responses.shape[1]}), got {reward_index.tolist()}")
        if not isinstance(policy_version, torch.Tensor):
            policy_version = torch.full((len(prompts),), int(policy_version), dtype=torch.long)
        attention_mask = torch.cat([prompt_mask.long(), attended.long()], dim=1)
        return cls(
            prompts=prompts,
            responses=responses,
            input_ids=torch.cat([prompts, responses], dim=1),
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
            loss_mask=loss_mask,
            token_source=token_source,
            reward_index=reward_index,
            policy_version=policy_version.long(),
            pad_token_id=pad_token_id,
            **lists,
        )

    def __reduce__(self) -> tuple:
        # Pickled (for Ray), a rollout is its two halves: the joined input_ids, attention_mask and
        # position_ids are rebuilt on arrival, the masks travel as bools, and what equals its default
        # (token_source, reward_index of one model turn; one policy version for all rows) is not sent. A
        # batch of a few hundred short rows then stays under Ray's 100 KiB limit for inline objects, so it
        # goes to the next worker inside the task instead of through the shared-memory object store (about
        # 2.4 ms less per call here).
        prompt_mask = self.attention_mask[:, : self.prompt_length].bool()
        lists = {name: getattr(self, name) for name in LIST_FIELDS}
        extra: dict[str, Any] = {}
        if not torch.equal(self.token_source, _model_turn(self.loss_mask)):
            extra["token_source"] = self.token_source
        if not torch.equal(self.reward_index, last_index(self.loss_mask)):
            extra["reward_index"] = self.reward_index
        versions = self.policy_version.unique()
        extra["policy_version"] = int(versions[0]) if len(versions) == 1 else self.policy_version
        if self.episodes is not None:
            extra["episodes"] = self.episodes
        if self.env_seconds:
            extra["env_seconds"] = self.env_seconds
        return (_unpickle, (self.prompts, prompt_mask, self.responses, self.loss_mask.bool(), self.pad_token_id,
                            lists, self.sample_log_probs, extra))

    def to(self, device: torch.device | str) -> Rollout:
        moved = {name: getattr(self, name).to(device) for name in TENSOR_FIELDS}
        return dataclasses.replace(self, **moved)  # sample_log_probs stay on the CPU: only the driver reads them

    def to_dict(self) -> dict[str, Any]:
        """Tensors and plain python only (safe for `torch.load(weights_only=True)`)."""
        data = {name: getattr(self, name) for name in TENSOR_FIELDS + LIST_FIELDS}
        episodes = None if self.episodes is None else [dataclasses.asdict(e) for e in self.episodes]
        return data | {"pad_token_id": self.pad_token_id, "sample_log_probs": self.sample_log_probs,
                       "episodes": episodes, "env_seconds": self.env_seconds}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rollout:
        names = TENSOR_FIELDS + LIST_FIELDS + ("pad_token_id",)
        episodes = data.get("episodes")
        return cls(**{name: data[name] for name in names}, sample_log_probs=data.get("sample_log_probs"),
                   episodes=None if episodes is None else [EpisodeSummary(**e) for e in episodes],
                   env_seconds=data.get("env_seconds", 0.0))


def _unpickle(prompts, prompt_mask, responses, loss_mask, pad_token_id, lists, sample_log_probs,
              extra=None) -> Rollout:
    extra = dict(extra or {})
    episodes, env_seconds = extra.pop("episodes", None), extra.pop("env_seconds", 0.0)
    rollout = Rollout.build(prompts, prompt_mask, responses, loss_mask, pad_token_id, **extra, **lists)
    rollout.sample_log_probs = sample_log_probs
    rollout.episodes, rollout.env_seconds = episodes, env_seconds
    return rollout


def last_index(mask: torch.Tensor) -> torch.Tensor:
    """Column of the last set entry of each row, 0 for a row with none. (batch,) long"""
    columns = torch.arange(mask.shape[1], device=mask.device)
    return torch.where(mask.bool(), columns, 0).amax(dim=1) if mask.shape[1] else mask.new_zeros(len(mask)).long()


def _model_turn(mask: torch.Tensor) -> torch.Tensor:
    """token_source of one model turn: MODEL where `mask` is set, PAD elsewhere. (batch, R) int8"""
    return mask.bool().to(torch.int8) * TokenSource.MODEL


def _pad_columns(x: torch.Tensor, width: int, value: int, *, left: bool) -> torch.Tensor:
    missing = width - x.shape[1]
    if missing == 0:
        return x
    pad = x.new_full((x.shape[0], missing), value)
    return torch.cat([pad, x] if left else [x, pad], dim=1)


def demonstration_rollout(items: Sequence[dict[str, Any]], uid_offset: int = 0) -> Rollout:
    """SFT's batch: data items with `response_ids` (RLDataset with demonstrations) as a Rollout of one row each,
    prompts left-padded and responses right-padded to the batch's longest; every response token (its EOS too) is
    in the loss mask, so `actor.sft` trains on the responses and never on the prompts."""
    from rlgraph.models.sequences import left_pad

    if not items:
        raise ValueError("a batch of demonstrations needs at least one row")
    if any("response_ids" not in item for item in items):
        raise ValueError("these rows hold no responses: `demos` needs SFT data (a `response` or `messages` column)")
    pad = int(items[0]["pad_token_id"])
    prompts, prompt_mask = left_pad([item["input_ids"] for item in items], pad)  # (batch, P)
    width = max(len(item["response_ids"]) for item in items)
    responses = torch.full((len(items), width), pad, dtype=torch.long)  # (batch, R)
    loss_mask = torch.zeros((len(items), width), dtype=torch.long)  # (batch, R)
    for row, item in enumerate(items):
        ids = item["response_ids"]
        responses[row, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
        loss_mask[row, : len(ids)] = 1
    return Rollout.build(prompts, prompt_mask, responses, loss_mask, pad,
                         uid=[uid_offset + i for i in range(len(items))],
                         data_source=[item.get("data_source", "") for item in items],
                         ground_truth=[item.get("ground_truth") for item in items],
                         extra_info=[item.get("extra_info") for item in items],
                         prompt_text=[item.get("prompt_text", "") for item in items],
                         response_text=[item["response_text"] for item in items])
