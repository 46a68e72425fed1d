import pytest
import torch

from tests.train.batches import oracle_batch

torch.set_num_threads(1)  # tiny models: extra threads only spin on a shared CPU


@pytest.fixture(scope="session", autouse=True)
def session_data(tmp_path_factory):
    """Every test of this area writes its models and pools into one private data folder (built once per
    session), never the project's data/: a test that needs its own folder sets RCEA_DATA itself."""
    with pytest.MonkeyPatch.context() as mp:
        data = tmp_path_factory.mktemp("train-data")
        mp.setenv("RCEA_DATA", str(data))
        yield data


DIST_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def fresh_accelerate():
    """A test that makes its own Accelerator(mixed_precision=...) starts from a single plain process and leaves
    none behind: Accelerate keeps one process-wide AcceleratorState and writes os.environ; TRL's vLLM path (its
    stand-ins in this area) sets RANK/WORLD_SIZE/MASTER_* and may leave a process group, after which Accelerate
    wraps a model in DistributedDataParallel. Both are cleared before the test and put back after it."""
    import os

    from accelerate.state import AcceleratorState

    saved = dict(os.environ)
    for name in DIST_VARIABLES:
        os.environ.pop(name, None)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    AcceleratorState._reset_state(True)
    yield
    AcceleratorState._reset_state(True)
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture
def oracle():
    return oracle_batch()
