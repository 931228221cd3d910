"""Build the built-in policy `builtin:arith-tool-gpt`: a tiny rotary GPT that sometimes, and not always
well, calls a calculator to multiply two-digit numbers.

    python -m rlgraph.models.build_arith_tool_gpt --out DIR

It trains a fresh LlamaForCausalLM (4 layers, width 64; the character tokenizer of `char_tokenizer`
plus the four tool tags as single ids) with teacher forcing on the TRAIN split of builtin:arith-tool
only, on a mix of transcripts of `a*b=`:

- tool use:       `<tool_call>calc a*b</tool_call>` `<tool_response>P</tool_response>` `P</s>`
- imperfect use:  the same with a wrong expression in the call (an operand's digits swapped, or one
                  digit changed), the calculator's value P' of it in the reply, and P' copied;
- broken call:    an expression that does not parse (`37*`, `*48`, `37**48`), the calculator's
                  `error: ...` in the reply, and a direct answer after it;
- direct answer:  `P</s>`, the true product written at once; the model cannot learn to multiply in
                  this budget, so its direct answers are mostly wrong.

The loss covers the model's tokens only: the `<tool_response>...</tool_response>` part is the
environment's and is masked out, as the RL rollout masks it. How often a prompt is answered through
the tool depends on the tens digit t of its first operand: the share is `tool_share_low` at t = 1,
rising linearly to `tool_share_high` at t = 9, so the model learns an input-dependent habit: at
temperature 1 it calls the tool on a quarter to a third of the prompts, greedily only where the tool
beats the likeliest first digit of a direct answer. Greedy validation accuracy with the calculator in
the loop is therefore low, while sampled episodes that call the tool correctly earn the reward: GRPO
has the signal to turn the habit into a rule.

The shipped build stopped at step 175 (about 1-2 min on one thread): on the 500 val prompts, greedy
accuracy 0.162 with 16% of episodes calling the tool; sampled (T = 1) accuracy 0.134 with 25.6% calling
it, 7.8% of calls answered with an error. A plain GRPO loop (n = 8, 32 prompts a step, lr 2e-4,
minibatch 16, clip 0.2) took its greedy accuracy to 0.83 in 10 steps, 98% of episodes calling the tool.

The build checks, every `eval_every` steps on the first `eval_rows` val prompts, the multi-turn
greedy accuracy with the calculator in the loop (at most 3 model turns and 32 response tokens, the
tool's reply inserted as ids, as the RL rollout does it), and stops at the first check where the
model copies the calculator's answers and the accuracy lies in the target band. `rlgraph_build.json`
records the recipe, every check, and on the whole val split the greedy accuracy and tool-call rate,
and the sampled (temperature 1) accuracy and tool-call rate.

The multi-turn evaluation here is the build's own (the models layer never imports the workers):
it stops a model turn at `</tool_call>` or EOS and answers with `rlgraph.tasks.arith_tool.evaluate`,
as `rlgraph.workers.envs.calculator:Calculator` does.

Deterministic on one machine: seeded, one thread, global RNG state restored afterwards. It is the
recipe of the weights shipped as builtin:arith-tool-gpt (hashes pinned in registry.py); another CPU
may round differently, stop at another check and give other bytes.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rlgraph.models.recipe import build_main, deterministic, save_build, tiny_llama

MODEL_NAME = "builtin:arith-tool-gpt"
MODEL_VERSION = 1  # in rlgraph_build.json: bump it whenever the recipe below changes


@dataclasses.dataclass(frozen=True)
class Architecture:
    hidden_size: int = 64
    intermediate_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    max_position_embeddings: int = 64  # prompt <= 6 tokens + a response budget of 32
    rope_theta: float = 10000.0


@dataclasses.dataclass(frozen=True)
class Recipe:
    seed: int = 0
    batch_size: int = 128  # 256 took as many steps, at twice the time each
    lr: float = 5e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    max_steps: int = 600
    # Greedy decoding calls the tool where its share beats the likeliest first digit of a direct answer
    # (a share above ~0.4 here): 0.10 -> 0.58 made 30% of greedy answers tool calls, too many.
    tool_share_low: float = 0.12  # share of tool transcripts for first operands 10..19
    tool_share_high: float = 0.48  # ... rising linearly to this for 90..99
    wrong_call_share: float = 0.25  # of the tool transcripts: a wrong expression in the call
    broken_call_share: float = 0.08  # of the tool transcripts: a call the calculator answers with an error
    eval_every: int = 25
    eval_rows: int = 200  # the first rows of the val split, checked while training
    min_copy_rate: float = 0.95  # a check counts once the model copies this share of the tool's answers
    target_low: float = 0.08  # stop at the first such check with greedy accuracy in [target_low, target_high]
    target_high: float = 0.25
    accept_low: float = 0.05  # the whole val split must land in this band, or the build fails
    accept_high: float = 0.30
    accept_sampled_calls: tuple[float, float] = (0.2, 0.65)  # the sampled tool-call rate on the val split
    max_turns: int = 3  # of the evaluation episodes, as the RL spec runs them
    max_response_tokens: int = 32
    num_threads: int = 1


def build_arith_tool_gpt(
    out: str | Path,
    recipe: Recipe = Recipe(),
    arch: Architecture = Architecture(),
    log: Callable[[str], None] | None = None,
) -> dict:
    """Train and save the model into `out` (made if missing); returns what rlgraph_build.json holds."""
    import torch

    from rlgraph.tasks import arith_tool

    log = log or logging.getLogger(__name__).info
    started = time.perf_counter()
    val_rows = arith_tool.make_rows("val")
    with deterministic(recipe.seed, recipe.num_threads):
        model, tokenizer, steps, checks = _train(recipe, arch, log)
        greedy = tool_episodes(model, tokenizer, val_rows, recipe.max_turns, recipe.max_response_tokens)
        sampled = tool_episodes(model, tokenizer, val_rows, recipe.max_turns, recipe.max_response_tokens,
                                temperature=1.0, seed=recipe.seed)
    low, high = recipe.accept_sampled_calls
    if not (recipe.accept_low <= greedy["accuracy"] <= recipe.accept_high
            and low <= sampled["tool_call_rate"] <= high):
        raise RuntimeError(
            f"arith-tool-gpt build ended at step {steps} with greedy val accuracy {greedy['accuracy']:.3f} "
            f"(accepted: [{recipe.accept_low}, {recipe.accept_high}]) and sampled tool-call rate "
            f"{sampled['tool_call_rate']:.3f} (accepted: [{low}, {high}]); adjust the recipe in {__file__}"
        )
    report = {
        "name": MODEL_NAME,
        "version": MODEL_VERSION,
        "num_parameters": sum(p.numel() for p in model.parameters()),
        "steps": steps,
        "val_accuracy": greedy["accuracy"],  # greedy, with the calculator in the loop
        "val_rows": len(val_rows),
        "greedy": greedy,
        "sampled": sampled,  # temperature 1, one sample per val prompt
        "checks": checks,  # greedy numbers on the first recipe.eval_rows val prompts
        "build_seconds": round(time.perf_counter() - started, 2),
        "architecture": dataclasses.asdict(arch),
        "recipe": dataclasses.asdict(recipe),
        "torch": torch.__version__,
        "data": f"builtin:arith-tool/train (v{arith_tool.DATA_VERSION})",
    }
    save_build(out, model, tokenizer, report)
    log(
        f"arith-tool-gpt: step {steps}; on the {len(val_rows)} val prompts greedy accuracy {greedy['accuracy']:.3f} "
        f"(tool calls {greedy['tool_call_rate']:.3f}), sampled accuracy {sampled['accuracy']:.3f} "
        f"(tool calls {sampled['tool_call_rate']:.3f}); {report['build_seconds']:.1f} s"
    )
    return report


def _train(recipe: Recipe, arch: Architecture, log: Callable[[str], None]) -> tuple[Any, Any, int, list]:
    """(model, tokenizer, steps taken, checks) trained until a greedy check lands in the target band."""
    import torch
    from rlgraph.models.char_tokenizer import build_char_tokenizer
    from rlgraph.tasks import arith_tool

    tokenizer = build_char_tokenizer(added_tokens=arith_tool.TOOL_TAGS)
    model = tiny_llama(arch, tokenizer)
    log(f"arith-tool-gpt: {sum(p.numel() for p in model.parameters()):,} parameters; "
        "training on builtin:arith-tool/train")

    pairs = arith_tool.split_pairs("train")
    transcripts = _transcripts(pairs, recipe.seed)
    input_ids, labels = _teacher_forcing_batch(tokenizer, [t for kinds in transcripts for t in kinds])
    kinds = len(transcripts[0])  # direct, tool, wrong call, broken call
    tool_share = torch.tensor([_tool_share(recipe, a) for a, _ in pairs])
    val_subset = arith_tool.make_rows("val")[: recipe.eval_rows]
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.98), weight_decay=recipe.weight_decay)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / recipe.warmup_steps))
    batches = torch.Generator().manual_seed(recipe.seed)

    checks: list[dict] = []
    model.train()
    for step in range(1, recipe.max_steps + 1):
        # --- one supervised step on a mix of transcripts; the loss covers the model's tokens only
        pair = torch.randint(len(pairs), (recipe.batch_size,), generator=batches)
        use_tool = torch.rand(recipe.batch_size, generator=batches) < tool_share[pair]
        slip = torch.rand(recipe.batch_size, generator=batches)
        broken, wrong = recipe.broken_call_share, recipe.broken_call_share + recipe.wrong_call_share
        tool_kind = torch.where(slip < broken, 3, torch.where(slip < wrong, 2, 1))
        kind = use_tool.long() * tool_kind  # 0 direct, 1 tool, 2 wrong call, 3 broken call
        idx = pair * kinds + kind
        loss = model(input_ids=input_ids[idx], labels=labels[idx]).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        warmup.step()

        # --- greedy check on the val subset, the calculator in the loop
        if step % recipe.eval_every:
            continue
        check = tool_episodes(model, tokenizer, val_subset, recipe.max_turns, recipe.max_response_tokens)
        checks.append({"step": step, **check})
        log(f"  step {step:5d}  loss {loss.item():.3f}  greedy accuracy {check['accuracy']:.3f}  "
            f"tool calls {check['tool_call_rate']:.3f}  copied {check['copy_rate']:.3f} (val subset)")
        if check["copy_rate"] >= recipe.min_copy_rate and recipe.target_low <= check["accuracy"] <= recipe.target_high:
            break
    return model.eval(), tokenizer, step, checks


def _tool_share(recipe: Recipe, a: int) -> float:
    """The share of tool transcripts for first operand `a`: linear in its tens digit."""
    return recipe.tool_share_low + (recipe.tool_share_high - recipe.tool_share_low) * (a // 10 - 1) / 8


def _transcripts(pairs: Sequence[tuple[int, int]], seed: int) -> list[tuple[list, ...]]:
    """Per pair: the direct answer, the tool use, a wrong call and a broken one, each as (text, source)
    segments; source "model" is trained on, "env" (the calculator's reply) and "prompt" are not."""
    from rlgraph.tasks import arith_tool as t

    rng = random.Random(seed)

    def tool_use(prompt: str, expression: str, answer: str | None = None) -> list:
        try:
            reply = t.evaluate(expression)
        except ValueError as err:
            reply = f"error: {err}"  # what ToolEnvironment answers when a tool raises
        return [(prompt, "prompt"), (f"{t.TOOL_CALL}{t.TOOL_NAME} {expression}{t.TOOL_CALL_END}", "model"),
                (f"{t.TOOL_RESPONSE}{reply}{t.TOOL_RESPONSE_END}", "env"), ((answer or reply) + t.EOS_TEXT, "model")]

    out = []
    for a, b in pairs:
        prompt, answer = t.prompt_text(a, b), t.answer_text(a, b)
        broken = rng.choice((f"{a}*", f"*{b}", f"{a}**{b}"))
        out.append(([(prompt, "prompt"), (answer + t.EOS_TEXT, "model")], tool_use(prompt, f"{a}*{b}"),
                    tool_use(prompt, _wrong_expression(a, b, rng)), tool_use(prompt, broken, answer)))
    return out


def _wrong_expression(a: int, b: int, rng: random.Random) -> str:
    """`a*b` with a slip a model makes copying it: one operand's digits swapped, or one digit changed."""
    while True:
        digits = list(f"{a}{b}")
        if rng.random() < 0.3:
            first = rng.choice((0, 2))
            digits[first], digits[first + 1] = digits[first + 1], digits[first]
        else:
            position = rng.randrange(4)
            digits[position] = rng.choice([d for d in "0123456789" if d != digits[position]])
        wrong = "".join(digits)
        if wrong != f"{a}{b}" and wrong[0] != "0" and wrong[2] != "0":
            return f"{wrong[:2]}*{wrong[2:]}"


def _teacher_forcing_batch(tokenizer: Any, transcripts: Sequence[list]) -> tuple[Any, Any]:
    """(input_ids, labels), right-padded; labels -100 but on the model's segments."""
    import torch

    sequences, targets = [], []
    for segments in transcripts:
        ids, target = [], []
        for text, source in segments:
            part = tokenizer(text)["input_ids"]
            ids += part
            target += part if source == "model" else [-100] * len(part)
        sequences.append(ids)
        targets.append(target)
    width = max(len(s) for s in sequences)
    input_ids = torch.tensor([s + [tokenizer.pad_token_id] * (width - len(s)) for s in sequences])
    labels = torch.tensor([t + [-100] * (width - len(t)) for t in targets])
    return input_ids, labels


# --- multi-turn evaluation with the calculator in the loop


def tool_episodes(
    model: Any,
    tokenizer: Any,
    rows: Sequence[dict],
    max_turns: int = 3,
    max_response_tokens: int = 32,
    temperature: float = 0.0,
    seed: int = 0,
) -> dict[str, float]:
    """Run one episode per row (greedy at temperature 0, else sampled) and return its numbers.

    A model turn ends at `</tool_call>`, EOS or the response budget; after a call, the calculator's reply
    (`<tool_response>VALUE</tool_response>`, or `error: ...`) is appended as ids and the model goes on,
    for at most `max_turns` turns and `max_response_tokens` tokens (the model's and the replies') in all.
    Returned: accuracy (task reward), tool_call_rate (share of episodes with a call), calls_per_episode,
    tool_error_rate (share of calls answered with an error), copy_rate (share of episodes that got a
    numeric reply whose final answer is that reply's number: how well the model copies).
    """
    from rlgraph.tasks import arith_tool as t

    episodes = run_episodes(model, tokenizer, [row["prompt"] for row in rows], max_turns, max_response_tokens,
                            temperature, seed)
    accuracy = copied = replied = calls = errors = 0
    for row, episode in zip(rows, episodes):
        text = tokenizer.decode(episode["ids"][episode["prompt"] :], skip_special_tokens=False)
        accuracy += t.exact_match(row["data_source"], text, row["reward_model"]["ground_truth"])
        calls, errors = calls + episode["calls"], errors + episode["errors"]
        if episode["reply"] is not None:
            replied += 1
            copied += t.final_answer(text) == episode["reply"]
    n = len(rows)
    return {
        "accuracy": accuracy / n,
        "tool_call_rate": sum(e["calls"] > 0 for e in episodes) / n,
        "calls_per_episode": calls / n,
        "tool_error_rate": errors / calls if calls else 0.0,
        "copy_rate": copied / replied if replied else 0.0,
    }


def run_episodes(model: Any, tokenizer: Any, prompts: Sequence[str], max_turns: int, max_response_tokens: int,
                 temperature: float = 0.0, seed: int = 0) -> list[dict]:
    """One episode per prompt: {"prompt": its length, "ids": prompt + response ids, "env": (start, end)
    spans of the inserted replies in `ids`, "calls", "errors", "reply": the last numeric reply or None}."""
    import torch

    from rlgraph.models.sequences import left_pad, position_ids_from_mask
    from rlgraph.tasks import arith_tool as t

    call_end = tokenizer.convert_tokens_to_ids(t.TOOL_CALL_END)
    eos = tokenizer.eos_token_id
    generator = torch.Generator().manual_seed(seed)
    episodes = [{"prompt": len(ids), "ids": ids, "env": [], "turn_start": len(ids), "turns": 1, "calls": 0,
                 "errors": 0, "reply": None, "done": False}
                for ids in (tokenizer(prompt)["input_ids"] for prompt in prompts)]
    was_training = model.training
    model.eval()
    try:
        while active := [e for e in episodes if not e["done"]]:
            input_ids, attention_mask = left_pad([e["ids"] for e in active], tokenizer.pad_token_id)
            with torch.no_grad():
                logits = model(input_ids=input_ids, attention_mask=attention_mask,
                               position_ids=position_ids_from_mask(attention_mask)).logits[:, -1].float()
            if temperature > 0:
                tokens = torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)[:, 0]
            else:
                tokens = logits.argmax(-1)
            for episode, token in zip(active, tokens.tolist()):
                episode["ids"] = episode["ids"] + [token]
                if token == call_end:
                    _answer_call(episode, tokenizer, max_turns, max_response_tokens)
                if token == eos or len(episode["ids"]) - episode["prompt"] >= max_response_tokens:
                    episode["done"] = True
    finally:
        model.train(was_training)
    return episodes


def _answer_call(episode: dict, tokenizer: Any, max_turns: int, max_response_tokens: int) -> None:
    """The calculator's reply to the turn that just ended at `</tool_call>`, appended as ids."""
    from rlgraph.tasks import arith_tool as t

    turn = tokenizer.decode(episode["ids"][episode["turn_start"] :], skip_special_tokens=False)
    body = turn.rsplit(t.TOOL_CALL, 1)[-1].removesuffix(t.TOOL_CALL_END) if t.TOOL_CALL in turn else None
    episode["calls"] += 1
    reply = None
    if body is None or not body.startswith(t.TOOL_NAME + " "):
        result = f"error: not a call of {t.TOOL_NAME}"
    else:
        try:
            result = reply = t.evaluate(body[len(t.TOOL_NAME) + 1 :])
        except ValueError as err:
            result = f"error: {err}"
    episode["errors"] += reply is None
    if episode["turns"] >= max_turns:
        episode["done"] = True
        return
    episode["reply"] = reply
    room = max_response_tokens - (len(episode["ids"]) - episode["prompt"])
    start = len(episode["ids"])
    episode["ids"] = episode["ids"] + tokenizer(f"{t.TOOL_RESPONSE}{result}{t.TOOL_RESPONSE_END}")["input_ids"][:room]
    episode["env"].append((start, len(episode["ids"])))
    episode["turn_start"] = len(episode["ids"])
    episode["turns"] += 1


def main(argv: list[str] | None = None) -> int:
    return build_main("rlgraph.models.build_arith_tool_gpt", __doc__, build_arith_tool_gpt, argv)


if __name__ == "__main__":
    sys.exit(main())
