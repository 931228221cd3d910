from rlgraph.contract.settings import ActorSettings, RefSettings, RolloutSettings
from rlgraph.runtime.roles import worker_specs

from .plans import grpo_plan

PATHS = {"actor": "/m", "ref": "/m", "rollout": "/m"}


def test_colocated_rollout_generates_with_the_actors_module():
    specs = worker_specs(grpo_plan(), PATHS)
    assert specs["rollout"].worker == "alias" and specs["rollout"].alias_of == "actor"
    assert specs["actor"].worker == "policy" and isinstance(specs["actor"].settings, ActorSettings)
    assert specs["ref"].worker == "policy" and isinstance(specs["ref"].settings, RefSettings)


def test_rollout_on_its_own_pool_holds_its_own_copy():
    specs = worker_specs(grpo_plan(rollout_pool="gen"), PATHS)
    assert specs["rollout"].worker == "rollout" and specs["rollout"].model_path == "/m"
    assert isinstance(specs["rollout"].settings, RolloutSettings) and specs["rollout"].settings.engine == "hf"


def test_actor_gets_the_plans_resolved_settings_and_a_seed_of_its_own():
    plan = grpo_plan()
    specs = worker_specs(plan, PATHS)
    assert specs["actor"].settings is plan.role("actor").settings
    assert specs["actor"].settings.optim.lr == 1e-4 and specs["actor"].settings.optim.betas == (0.9, 0.999)
    assert len({spec.seed for spec in specs.values() if spec.worker != "alias"}) == 2
