"""tests/deploy: the project's own .env (a user's NUM_WORKERS=4, say) must not change what Invoke's tasks do
under test; a test that needs one writes it and points `commands.ENV_FILE` there."""
import pytest


@pytest.fixture(autouse=True)
def no_project_env_file(monkeypatch, tmp_path):
    from orchestrate.ops import commands

    monkeypatch.setattr(commands, "ENV_FILE", tmp_path / "absent.env")
