"""Which Ray `--engine ray` reaches: the --address given, else RAY_ADDRESS's cluster, else a Ray of its own
(never a cluster it merely finds in Ray's address file). Checked against a recording stand-in for `ray`."""

from __future__ import annotations

import pytest

from orchestrate.engines import ray_exec


class RecordingRay:
    def __init__(self):
        self.calls = []

    def is_initialized(self):
        return False

    def init(self, **kwargs):
        self.calls.append(kwargs)
        return type("Ctx", (), {"dashboard_url": ""})()


@pytest.fixture
def fake(monkeypatch):
    ray = RecordingRay()
    monkeypatch.setattr(ray_exec, "_ray", lambda: ray)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return ray


def test_without_an_address_it_starts_its_own_ray_with_the_role_slots(fake):
    assert ray_exec.connect(None, gpus=False, log=lambda *_: None)
    assert fake.calls == [{"address": "local", "resources": {"train": 2, "infer": 1}}]


def test_ray_address_local_also_means_a_ray_of_its_own(fake, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "local")
    ray_exec.connect(None, gpus=True, log=lambda *_: None)
    assert fake.calls == [{"address": "local", "resources": {"train": 1, "infer": 8}}]


def test_ray_address_names_the_cluster_to_join_without_resources(fake, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "head:6379")
    ray_exec.connect(None, log=lambda *_: None)
    assert fake.calls == [{"address": "head:6379"}]


def test_an_explicit_address_wins(fake, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "other:6379")
    ray_exec.connect("head:6379", log=lambda *_: None)
    assert fake.calls == [{"address": "head:6379"}]
