from rlgraph.runtime.driver import _first_line
from rlgraph.runtime.step import derive_seed


def test_derived_seeds_differ_by_step_and_purpose_and_are_stable():
    assert derive_seed(0, 1, "generate/0") == derive_seed(0, 1, "generate/0")
    assert len({derive_seed(0, s, p) for s in range(3) for p in ("a", "b")}) == 6
    assert 0 <= derive_seed(123, 4, "x") < 2**62


def test_ray_messages_lose_their_colours():
    assert _first_line("\n\x1b[36mray::DeviceProcess.setup()\x1b[39m failed\nmore") == "ray::DeviceProcess.setup() failed"
