import pytest

from tests.train.batches import oracle_batch


@pytest.fixture
def oracle():
    return oracle_batch()
