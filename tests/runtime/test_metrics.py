import json

import torch

from rlgraph.plan.model import CallPlan
from rlgraph.runtime.metrics import MetricsWriter, batch_metrics, plot_curves, timing_name
from rlgraph.workers import Rollout


def _call(kind, role_kind=None, method=None):
    return CallPlan("x", "x", kind, "t", method, role_kind, [], [], 1)


def test_timing_names_follow_verl():
    assert timing_name(_call("role", "rollout", "generate")) == "gen"
    assert timing_name(_call("role", "actor", "log_prob")) == "old_log_prob"
    assert timing_name(_call("role", "ref", "log_prob")) == "ref"
    assert timing_name(_call("role", "critic", "values")) == "values"
    assert timing_name(_call("role", "critic", "update")) == "update_critic"
    assert timing_name(_call("role", "actor", "update")) == "update_actor"
    assert timing_name(_call("reward")) == "reward"
    assert timing_name(_call("transform")) == "adv"


def _rollout():
    prompts = torch.tensor([[0, 5], [6, 7]])
    responses = torch.tensor([[3, 1, 0], [3, 4, 5]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    lists = {k: ["a", "b"] for k in ("data_source", "prompt_text", "response_text")}
    return Rollout.build(prompts, torch.tensor([[0, 1], [1, 1]]), responses, mask, 0, uid=[0, 1],
                         ground_truth=["1", "2"], extra_info=[{}, {}], **lists)


def test_batch_metrics_use_sequence_sums_and_response_tokens():
    rollout = _rollout()
    scores = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    values = torch.tensor([[1.0, 3.0, 100.0], [2.0, 2.0, 2.0]])  # 100 sits after EOS: ignored
    m = batch_metrics(rollout, {"scores": scores, "values": values})
    assert m["critic/score/mean"] == 0.5 and m["critic/rewards/mean"] == 0.5
    assert m["critic/values/max"] == 3.0 and abs(m["critic/values/mean"] - 2.0) < 1e-6
    assert m["response_length/mean"] == 2.5 and m["response_length/clip_ratio"] == 0.5
    assert m["prompt_length/mean"] == 1.5


def test_writer_keeps_steps_up_to_a_resumed_checkpoint(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"training/global_step": s}) + "\n" for s in range(5)))
    writer = MetricsWriter(tmp_path, keep_up_to_step=2)
    writer.write({"training/global_step": 3, "x": torch.tensor(1.5), "nan": float("nan")})
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["training/global_step"] for r in lines] == [0, 1, 2, 3]
    assert lines[-1]["x"] == 1.5 and lines[-1]["nan"] is None
    assert MetricsWriter(tmp_path, keep_up_to_step=None).records == []  # a fresh run starts empty


def test_curves_png(tmp_path):
    records = [{"training/global_step": s, "critic/score/mean": s / 10} for s in range(1, 5)]
    records[0]["val/score/mean"] = 0.4
    assert plot_curves(records, tmp_path / "curves.png").stat().st_size > 1000


def test_batch_metrics_of_a_multi_turn_rollout_count_the_models_tokens():
    from tests.workers.test_batch import make_multi_turn

    rollout = make_multi_turn()  # MMEEEMM. MMM..... MEEM.... MMEMMMMM
    values = torch.where(rollout.loss_mask.bool(), 1.0, 100.0)  # 100 on inserted tokens and padding: ignored
    m = batch_metrics(rollout, {"scores": torch.zeros(4, 8), "values": values})
    assert m["response_length/mean"] == 4.0 and m["response_length/max"] == 7 and m["response_length/min"] == 2
    assert m["response_length/clip_ratio"] == 0.25  # only the last row fills every column
    assert m["critic/values/max"] == 1.0


def test_groups_whose_advantages_are_all_zero_are_counted():
    from rlgraph.algos import get_advantage_estimator

    grpo = get_advantage_estimator("grpo_advantage")
    uid = [0, 0, 1, 1, 2, 2]
    mask = torch.ones(6, 3)
    scores = torch.zeros(6, 3)
    scores[:, -1] = torch.tensor([0.3, 0.3, 1.0, 0.0, 0.0, 0.0])  # prompts 0 and 2 scored alike, prompt 1 did not
    advantages, _ = grpo(token_level_rewards=scores, response_mask=mask, index=uid)
    rollout = _rollout().select(torch.tensor([0, 1, 0, 1, 0, 1]))
    rollout.uid = uid
    m = batch_metrics(rollout, {"scores": scores, "advantages": advantages})
    assert m["batch/zero_advantage_groups"] == 2 / 3 and m["batch/zero_advantage_step"] == 0.0
    scores[3, -1] = 1.0  # now every prompt's samples scored alike: the step teaches nothing
    advantages, _ = grpo(token_level_rewards=scores, response_mask=mask, index=uid)
    m = batch_metrics(rollout, {"scores": scores, "advantages": advantages})
    assert m["batch/zero_advantage_groups"] == 1.0 and m["batch/zero_advantage_step"] == 1.0
    assert "batch/zero_advantage_groups" not in batch_metrics(rollout, {"scores": scores})  # no estimator: no count


def test_curves_on_a_full_disk_are_one_error_naming_the_file_and_leave_no_half_picture(tmp_path, monkeypatch):
    """Disk full after the last checkpoint: a RunError the loop turns into a warning (the run is trained), not a
    traceback, and no `.curves.png.tmp.png` left behind."""
    import errno

    import matplotlib.figure
    import pytest

    from rlgraph.runtime.errors import RunError

    def full(self, fname, *args, **kwargs):
        open(fname, "wb").write(b"half")  # what a write cut short leaves
        raise OSError(errno.ENOSPC, "No space left on device", str(fname))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", full)
    records = [{"training/global_step": s, "critic/score/mean": s / 10} for s in range(5)]
    with pytest.raises(RunError, match="disk full while writing"):
        plot_curves(records, tmp_path / "curves.png")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_judges_rows_without_a_score_are_left_out_of_the_score_metrics():
    rollout = _rollout()
    scores = torch.tensor([[0.0, 0.75, 0.0], [0.0, 0.0, float("nan")]])  # row 1: a verdict that held no score
    m = batch_metrics(rollout, {"scores": scores})
    assert (m["critic/score/mean"], m["critic/score/min"], m["critic/rewards/mean"]) == (0.75, 0.75, 0.75)
