"""Pinned hub revisions: passed to every load, resolved commit recorded in manifests (no network here)."""

import json

import pytest

from rcea import hub
from rcea.config import load_config

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def clean_record(monkeypatch):
    monkeypatch.setattr(hub, "_RESOLVED", {})


def test_cached_commit_reads_the_refs_of_the_local_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants as c

    monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path))
    refs = tmp_path / "datasets--Org--Pool" / "refs"
    refs.mkdir(parents=True)
    (refs / "main").write_text(SHA)
    assert hub.cached_commit("Org/Pool", "main", "dataset") == SHA
    assert hub.cached_commit("Org/Pool", "v2", "dataset") == "unresolved:v2"
    assert hub.cached_commit("Org/Model", SHA) == SHA          # a sha is its own answer


def test_policy_model_is_a_snapshot_of_the_configured_revision(tmp_path, monkeypatch):
    import huggingface_hub

    calls = []

    def fake_snapshot(repo_id, revision, allow_patterns):
        calls.append((repo_id, revision))
        path = tmp_path / "snapshots" / SHA
        path.mkdir(parents=True, exist_ok=True)
        return str(path)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    from rcea.tiny import model_path

    cfg = load_config("7b", "grpo", ['model.revision="refs/pr/1"'])
    assert model_path(cfg) == str(tmp_path / "snapshots" / SHA)
    assert calls == [("Qwen/Qwen2.5-7B", "refs/pr/1")]
    assert hub.resolved() == {"model": f"Qwen/Qwen2.5-7B@{SHA}"}


def test_training_pool_is_loaded_at_its_revision(monkeypatch):
    import datasets

    seen = {}
    monkeypatch.setattr(datasets, "load_dataset", lambda name, split, revision: seen.update(
        name=name, split=split, revision=revision) or [])
    from rcea.data import load_train_records

    load_train_records(load_config("3b", None, [f'data.train_pool_revision="{SHA}"']), None)
    assert seen == {"name": "Skywork/Skywork-OR1-RL-Data", "split": "math", "revision": SHA}
    assert hub.resolved() == {"train_pool": f"Skywork/Skywork-OR1-RL-Data@{SHA}"}


def test_manifests_carry_the_resolved_revisions(tmp_path):
    from rcea.store import manifest_path, write_manifest

    hub.record("model", "Qwen/Qwen2.5-3B", SHA)
    (tmp_path / "a.json").write_text("{}")
    write_manifest(tmp_path / "a.json")
    assert json.loads(manifest_path(tmp_path / "a.json").read_text())["hub_revisions"] == {
        "model": f"Qwen/Qwen2.5-3B@{SHA}"}
