import pytest
import torch

from tests.train.batches import oracle_batch

torch.set_num_threads(1)  # tiny models: extra threads only spin on a shared CPU


@pytest.fixture
def oracle():
    return oracle_batch()
