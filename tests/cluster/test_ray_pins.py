"""One Ray version everywhere: the driver (tools) and both images' nodes must run the same Ray."""

from __future__ import annotations

import ray

from orchestrate.ops.lockfiles import read_pins
from rcea.paths import project_root


def test_ray_is_pinned_to_one_version_in_the_driver_and_both_images():
    locks = project_root() / "lockfiles"
    pins = {name: read_pins((locks / f"{name}.txt").read_text()).get("ray") for name in ("tools", "train", "infer")}
    assert len(set(pins.values())) == 1 and None not in pins.values(), pins
    assert ray.__version__ == pins["tools"]   # the environment running this test is the driver's


def test_doctor_checks_the_version_and_reaches_the_head():
    import socket

    import pytest

    from orchestrate.engines.preflight import parse_address, pinned_ray, ray_checks, ray_facts

    assert parse_address("10.0.0.5:6379") == ("10.0.0.5", 6379) == parse_address("ray://10.0.0.5:6379")
    with pytest.raises(ValueError, match="HOST:PORT"):
        parse_address("10.0.0.5")
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    try:
        up = ray_facts(f"127.0.0.1:{port}")
    finally:
        server.close()
    down = ray_facts(f"127.0.0.1:{port}", timeout_s=1)
    assert up["version"] == up["pinned"] == pinned_ray() and up["reachable"] is True
    assert [c[:2] for c in ray_checks(up)] == [("ray", "ok"), ("ray head", "ok")]
    assert down["reachable"] is False and ray_checks(down)[1][1] == "fail" and "ray-head" in ray_checks(down)[1][3]
    old = dict(up, version="2.0.0", address=None)
    assert [c[:2] for c in ray_checks(old)] == [("ray", "fail")]
    assert ray_checks(dict(old, version=None))[0][1] == "warn"
