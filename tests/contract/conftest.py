"""Contract tests: our arguments against the real vLLM / TRL classes of each image's pinned version.

They run in the contract environments (scripts/bootstrap contract-infer / contract-train: the role's CPU
environment plus the image's vLLM wheel and the few packages vLLM needs at import, from
lockfiles/contract-*.txt). No GPU: classes are constructed where that needs none (EngineArgs,
SamplingParams, LoRARequest, vLLM's pydantic LoRAConfig) and signatures are read where building the
engine would need CUDA.
"""

import importlib.util

import pytest


def pytest_collection_modifyitems(config, items):
    if importlib.util.find_spec("vllm") is None:
        skip = pytest.mark.skip(reason="vLLM is not installed here: run tests/contract in .envs/contract-infer "
                                       "or .envs/contract-train (scripts/test does)")
        for item in items:
            item.add_marker(skip)
