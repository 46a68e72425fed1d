"""The host's state folder that compose.yaml bind-mounts at data/state in every container (issue 28: one state
store shared by the study's driver here and the containers): made by Invoke before any container starts."""
from __future__ import annotations

import os

import pytest
from invoke.exceptions import Exit

from orchestrate.ops import shell


def test_made_as_the_containers_user_and_rcea_data_made_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(shell, "ROOT", tmp_path)
    monkeypatch.setenv("RCEA_DATA", "mine")   # relative: Compose would read "mine/state" as a volume's name
    folder = shell.state_folder()
    assert folder == tmp_path / "mine" / "state" and folder.is_dir()
    assert os.environ["RCEA_DATA"] == str(tmp_path / "mine")
    st = folder.stat()
    assert (st.st_uid, st.st_gid) == (shell.container_ids() if os.getuid() == 0 else (os.getuid(), os.getgid()))


def test_a_folder_this_user_cannot_write_is_refused_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr(shell, "ROOT", tmp_path)
    monkeypatch.setenv("RCEA_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(shell.os, "getuid", lambda: 1001)    # a user, and Docker made the folder as root
    monkeypatch.setattr(shell.os, "access", lambda path, mode: False)
    with pytest.raises(Exit) as exc:
        shell.state_folder()
    assert exc.value.code == 2 and "sudo chown -R 1001:" in str(exc.value.message)
    assert str(tmp_path / "data" / "state") in str(exc.value.message)
