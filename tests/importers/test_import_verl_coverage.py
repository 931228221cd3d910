"""Nothing silent: every key of verl's current trainer config (fixtures/verl_ppo_trainer_defaults.keys, each at its
default) ends in the imported spec as a `# verl:` comment (mapped, or a comment saying why it has no effect) or in
a warning that names it. `python -m tests.importers.test_import_verl_coverage` prints the counts."""

from __future__ import annotations

import re
from pathlib import Path

from rlgraph.commands.import_verl import import_verl_text

KEYS = Path(__file__).parent / "fixtures" / "verl_ppo_trainer_defaults.keys"


def outcomes() -> dict[str, str]:
    """key -> mapped | commented | warned | silent, for an import of every key at once."""
    data = KEYS.read_bytes()
    keys = [line.split("=", 1)[0] for line in data.decode().splitlines() if line and not line.startswith("#")]
    text, warnings = import_verl_text(data, "verl_ppo_trainer_defaults.sh", "80GiB")
    comments = [line.split("# verl: ", 1)[1] for line in text.splitlines() if "# verl: " in line]
    token = re.compile(r"(?<![\w.])[\w.@-]+(?![\w.])")
    warned = {name for w in warnings for name in re.findall(r"(?<![\w.])([\w.@-]+)=", w)}
    commented = {c.split("=", 1)[0] for c in comments if re.match(r"[\w.@-]+=", c) and "(not mapped" not in c}
    named = {name for c in comments for name in token.findall(c)}
    result = {}
    for key in keys:
        short = key.removeprefix("actor_rollout_ref.")
        if key in warned:
            result[key] = "warned"
        elif short in commented:
            result[key] = "commented"  # `# verl: KEY=VALUE (as rlgraph: ...)` / `(no effect: ...)`
        elif short in named:
            result[key] = "mapped"
        else:
            result[key] = "silent"
    return result


def test_no_key_of_verls_trainer_config_is_silent():
    result = outcomes()
    assert len(result) > 700
    assert [key for key, outcome in result.items() if outcome == "silent"] == []


if __name__ == "__main__":
    counts: dict[str, int] = {}
    for outcome in outcomes().values():
        counts[outcome] = counts.get(outcome, 0) + 1
    print(f"{sum(counts.values())} keys: " + ", ".join(f"{counts.get(k, 0)} {k}" for k in
                                                      ("mapped", "commented", "warned", "silent")))
