"""train/gpu_measure.py: what train.gpu_check measures besides the steps (memory in absolute GiB against an 80 GB
H100, the frozen base after the syncs, completions ending at a stop token), checked by hand on CPU."""

import pytest
import torch
from trl.generation.vllm_generation import VLLMGeneration

from tests.train.test_merge_drift import run_syncs
from train import gpu_measure as gm
from train.vllm_sync import PolicySyncedVLLM


def test_engine_fraction_keeps_the_h100_gib():
    h200 = 139.8
    f = gm.engine_fraction(0.25, h200)
    assert f * h200 == pytest.approx(0.25 * 81_559 / 1024)  # 19.9 GiB, as on the H100
    assert gm.engine_fraction(0.25, 79.2) == 0.25            # an H100 (or smaller): the scale's own fraction
    with pytest.raises(ValueError):
        gm.engine_fraction(1.2, h200)


def test_memory_verdict_is_absolute_against_the_h100():
    ok, detail = gm.memory_verdict(70.0, 139.8, 0.142)
    assert ok and "70.0 GiB in use" in detail and "80 GB H100's 79.6 GiB" in detail and "this GPU has 139.8" in detail
    ok, detail = gm.memory_verdict(76.0, 139.8, None)  # fits an H200 easily, not an H100 (limit 0.95 x 79.6)
    assert not ok and "DOES NOT FIT" in detail


def test_base_change_counts_a_one_ulp_change():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8)).to(torch.bfloat16)
    before = gm.frozen_copy(model)
    assert gm.base_verdict(gm.base_change(model, before))[0]
    with torch.no_grad():
        w = model[0].weight
        w[0, 0] = torch.nextafter(w[0, 0].float(), torch.tensor(1.0)).to(torch.bfloat16)  # not representable: rounds
        w[1, 1] = w[1, 1] + abs(w[1, 1]) * 2.0**-7  # one bf16 step up
    change = gm.base_change(model, before)
    assert change["changed"] == 1 and change["total"] == 72 and change["max"] > 0
    ok, detail = gm.base_verdict(change)
    assert not ok and "1 of 72" in detail and "CHANGED THE BASE" in detail


@pytest.mark.parametrize("cls,exact", [(PolicySyncedVLLM, True), (VLLMGeneration, False)])
def test_base_verdict_on_the_two_syncs(cls, exact):
    """The device check's measurement on the unit test's syncs: 0 changed with ours, some with TRL's."""
    model, _, before, _ = run_syncs(cls, syncs=50)
    change = gm.base_change(model, before)
    assert change["total"] == sum(t.numel() for t in before.values()) and not change["missing"]
    assert (change["changed"] == 0) is exact and gm.base_verdict(change)[0] is exact


def test_stop_counts_by_hand():
    rows = [[5, 2, 0, 0], [5, 6, 7, 8], [4, 2, 9, 2], [], [0, 4, 0]]  # as the sampler returned them, pad 0
    # row 0 ends at stop 2 (then generate's padding); row 1 reaches the limit; row 2 ends at 2 but ran on past
    # 4 and 2; row 3 is empty; row 4 ends at stop 4 (a sampled pad before it is a token like any other)
    assert gm.stop_counts(rows, [2, 4], pad_id=0) == {"n": 5, "ended": 3, "ran_on": 1}
    assert gm.stop_counts(rows, [2, 4]) == {"n": 5, "ended": 1, "ran_on": 3}  # padding read as tokens
    ok, detail = gm.stop_verdict([gm.stop_counts(rows[:4], [2, 4], 0)], ["<|im_end|>", "<|endoftext|>"])
    assert not ok and "2 of 4" in detail and "50.0%" in detail and "IGNORES THE STOP SET" in detail
    ok, detail = gm.stop_verdict([gm.stop_counts(rows[:2], [2], 0)], ["<|im_end|>"])
    assert ok and "1 of 2 rollout completions (50.0%) end at a stop token (<|im_end|>)" in detail
    assert gm.stop_verdict([], ["<|im_end|>"]) == (False, "no rollout completions recorded")
