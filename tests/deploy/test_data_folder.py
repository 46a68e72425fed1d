"""The host's data folder, which compose.yaml bind-mounts at /workspace/data in every container (issue 39: one
view of the data; the state store, state/<scale>.sqlite, inside it): made by Invoke before any container starts,
as the user who runs the study, so its files stay that user's."""
from __future__ import annotations

import os

import pytest
from invoke.exceptions import Exit

from orchestrate.ops import shell


def test_made_as_the_containers_user_and_rcea_data_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(shell, "ROOT", tmp_path)
    monkeypatch.setenv("RCEA_DATA", "mine")   # relative: Compose would read "mine" as a volume's name
    monkeypatch.setenv("RCEA_RESULTS", str(tmp_path / "out"))
    folder = shell.data_folder()
    assert folder == tmp_path / "mine" and (folder / "state").is_dir() and (tmp_path / "out").is_dir()
    assert os.environ["RCEA_DATA"] == str(tmp_path / "mine")
    for made in (folder, folder / "state", tmp_path / "out"):
        st = made.stat()
        assert (st.st_uid, st.st_gid) == (shell.container_ids() if os.getuid() == 0 else (os.getuid(), os.getgid()))


@pytest.mark.skipif(os.getuid() != 0, reason="root only: what root made goes to the containers' user")
def test_root_gives_what_it_made_in_the_data_folder_to_the_containers(tmp_path, monkeypatch):
    """A tiny study run as root left train/ root's: a container (1000:1000) could not make train/3b in it."""
    monkeypatch.setattr(shell, "ROOT", tmp_path)
    data = tmp_path / "data"
    (data / "train" / "tiny" / "grpo").mkdir(parents=True)
    (data / "train" / "tiny" / "grpo" / "summary.json").write_text("{}")
    (data / "theirs").mkdir()
    os.chown(data / "theirs", 1234, 1234)   # another user's: left alone
    monkeypatch.setenv("RCEA_DATA", str(data))
    shell.data_folder()
    ids = shell.container_ids()
    for path in (data, data / "state", data / "train", data / "train" / "tiny" / "grpo" / "summary.json"):
        assert (path.stat().st_uid, path.stat().st_gid) == ids, path
    assert (data / "theirs").stat().st_uid == 1234
    assert shell.give_to_containers(data) == 0   # nothing of root's left


def test_a_folder_this_user_cannot_write_is_refused_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(shell, "ROOT", tmp_path)
    monkeypatch.setenv("RCEA_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(shell.os, "getuid", lambda: 1001)    # a user, and Docker made the folder as root
    monkeypatch.setattr(shell.os, "access", lambda path, mode: False)
    with pytest.raises(Exit) as exc:
        shell.data_folder()
    assert exc.value.code == 2 and "sudo chown -R 1001:" in str(exc.value.message)
    assert str(tmp_path / "data") in str(exc.value.message)
