"""run_batch at every launcher (issue 39): the output check after a unit exits runs for a container as for a local
process (the data folder is the host's, bind-mounted), a killed container (exit 137/143) is transient, the same
exit of a local process is not (it was not killed: a killed local process has a negative status), and a unit
is pinned to its GPU through its launcher's variable."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrate.engines.batch import TransientUnitError, UnitError, run_batch


@dataclass(frozen=True)
class Shell:
    """A unit whose command is a shell line; done when <data>/out exists."""

    launcher: str
    line: str
    role = "train"

    @property
    def key(self) -> str:
        return f"shell:{self.launcher}:{abs(hash(self.line))}"

    @property
    def group(self) -> str:
        return self.key

    @property
    def gpu_env(self) -> str:
        from rcea.launch import gpu_variable

        return gpu_variable(self.launcher)

    def done(self, data_root) -> bool:
        return (Path(data_root) / "out").exists()

    @staticmethod
    def command(batch, python, data_root, spec_dir) -> list[str]:
        return ["sh", "-c", batch[0].line]


@pytest.mark.parametrize("rc", [137, 143])
def test_a_killed_container_is_transient_and_a_local_exit_of_the_same_status_is_not(tmp_path, rc):
    with pytest.raises(TransientUnitError, match=rf"container killed \(exit {rc}\)"):
        run_batch([Shell("compose", f"exit {rc}")], tmp_path)
    with pytest.raises(UnitError, match=rf"^exit {rc}:"):
        run_batch([Shell("local", f"exit {rc}")], tmp_path)


@pytest.mark.parametrize("launcher", ["compose", "local"])
def test_the_outputs_are_checked_after_a_unit_exits_at_every_launcher(tmp_path, launcher):
    with pytest.raises(UnitError, match="exit 0 but the outputs of shell:.* are incomplete"):
        run_batch([Shell(launcher, "true")], tmp_path)
    line = f'echo "${{{"TRAIN_GPU" if launcher == "compose" else "CUDA_VISIBLE_DEVICES"}}}" > "$RCEA_DATA/out"'
    done = run_batch([Shell(launcher, line)], tmp_path, gpu_ids=[3])
    assert done["ran"] and (tmp_path / "out").read_text().strip() == "3"   # pinned through its launcher's variable
    assert run_batch([Shell(launcher, "exit 1")], tmp_path)["ran"] == []   # complete: skipped, not run
