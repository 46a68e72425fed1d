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


@pytest.fixture
def oracle():
    return oracle_batch()
