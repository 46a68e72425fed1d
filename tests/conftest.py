"""Test tiers: CPU by default; `@pytest.mark.gpu` tests run only where CUDA is available."""

import importlib.util

import pytest


def _cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if gpu_items and not _cuda():
        skip = pytest.mark.skip(reason="needs a CUDA GPU (run infer/gpu_check.py on a GPU host)")
        for item in gpu_items:
            item.add_marker(skip)
