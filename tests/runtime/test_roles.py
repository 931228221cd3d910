from rlgraph.runtime.roles import worker_specs
from .plans import grpo_plan

PATHS = {"actor": "/m", "ref": "/m", "rollout": "/m"}


def test_colocated_rollout_generates_with_the_actors_module():
    specs = worker_specs(grpo_plan(), PATHS)
    assert specs["rollout"].worker == "alias" and specs["rollout"].alias_of == "actor"
    assert specs["actor"].worker == "policy" and specs["actor"].kwargs["trainable"] is True
    assert specs["ref"].kwargs["trainable"] is False


def test_rollout_on_its_own_pool_holds_its_own_copy():
    specs = worker_specs(grpo_plan(rollout_pool="gen"), PATHS)
    assert specs["rollout"].worker == "policy"
    assert specs["rollout"].kwargs == {**specs["rollout"].kwargs, "model_path": "/m", "trainable": False}


def test_actor_gets_its_optimizer_and_the_loss_settings_of_its_update_call():
    kwargs = worker_specs(grpo_plan(), PATHS)["actor"].kwargs
    assert kwargs["lr"] == 1e-4 and kwargs["betas"] == (0.9, 0.999) and kwargs["grad_clip"] == 1.0
    assert kwargs["clip_low"] == kwargs["clip_high"] == 0.2
    assert kwargs["kl_loss_coef"] == 0.001 and kwargs["kl_loss_kind"] == "low_var_kl"
