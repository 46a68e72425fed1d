"""`python -m train.noise_study`: the run-to-run noise script, on tiny budgets (a short warm start, 2 steps)."""

import json

import pytest

from train.noise_study import main, report

TINY = ["toy.warm_start_steps=30", "train.max_steps=2", "train.save_steps=1", "train.per_device_batch=16",
        "train.max_completion_tokens=16", "probe.max_new_tokens=16", "data.draw_size=64"]


def test_seeds_script_trains_each_seed_and_reports_from_its_own_measurements(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RCEA_DATA", str(tmp_path))
    monkeypatch.delenv("RCEA_OVERRIDES", raising=False)
    import train.noise_study as seeds_module

    measured: list[float] = []  # what the scoring function returned, in call order: warm start, seed 1, seed 2
    real = seeds_module.sampled_accuracy

    def recording(*args, **kwargs):
        measured.append(real(*args, **kwargs))
        return measured[-1]

    monkeypatch.setattr(seeds_module, "sampled_accuracy", recording)
    argv = ["--seeds", "1,2", "--questions", "5", "--k", "2"] + [a for o in TINY for a in ("--override", o)]
    assert main(argv) == 0
    res = json.loads((tmp_path / "results" / "tiny" / "seeds-grpo.json").read_text())
    assert res["seeds"] == [1, 2] and len(measured) == 3
    warm, a1, a2 = measured
    for acc in measured:  # a mean of 0/1 rewards over 5 questions x 2 samples
        assert 0.0 <= acc <= 1.0 and abs(acc * 10 - round(acc * 10)) < 1e-9
    # the file's numbers, recomputed by hand from the measurements (two seeds: sd = |a1 - a2| / sqrt(2))
    assert res["warm_start"] == warm and res["accuracy"] == [a1, a2]
    assert res["mean"] == pytest.approx((a1 + a2) / 2, abs=1e-12)
    assert res["sd"] == pytest.approx(abs(a1 - a2) / 2 ** 0.5, abs=1e-12)
    assert res["gain"] == pytest.approx((a1 + a2) / 2 - warm, abs=1e-12)
    assert res["min_gain"] == pytest.approx(min(a1, a2) - warm, abs=1e-12)
    assert res["beats_noise"] == ((a1 + a2) / 2 - warm > abs(a1 - a2) / 2 ** 0.5 and min(a1, a2) > warm)
    assert res["eval_se"] == pytest.approx((warm * (1 - warm) / 10) ** 0.5, abs=1e-12)
    runs = sorted((tmp_path / "seeds" / "tiny" / "grpo").glob("seed-*"))
    assert [r.name.split("-")[1] for r in runs] == ["1", "2"]
    assert all((r / "summary.json").exists() and (r / "train.log").read_text() for r in runs)
    md = (tmp_path / "results" / "tiny" / "seeds-grpo.md").read_text()
    assert f"{res['warm_start']:.3f}" in md and f"{res['sd']:.3f}" in md
    # a rerun reuses both training runs and measures the same numbers
    capsys.readouterr()
    assert main(argv) == 0
    assert json.loads((tmp_path / "results" / "tiny" / "seeds-grpo.json").read_text())["accuracy"] == res["accuracy"]
    assert "is complete" in "".join(r.joinpath("train.log").read_text() for r in runs)


def test_report_verdict_follows_the_numbers():
    base = {"method": "grpo", "scale": "tiny", "seeds": [1, 2, 3], "questions": 200, "k": 8, "eval_seed": 2027,
            "eval_se": 0.012, "warm_start": 0.46, "accuracy": [0.55, 0.53, 0.54], "mean": 0.54, "sd": 0.01,
            "gain": 0.08, "gain_over_sd": 8.0, "min_gain": 0.07, "beats_noise": True}
    assert "beyond run-to-run noise" in report(base) and "NOT" not in report(base)
    assert "NOT beyond noise" in report({**base, "beats_noise": False})


@pytest.mark.parametrize("argv, msg", [(["--seeds", "1"], "at least two seeds"),
                                       (["--scale", "3b"], "tiny toy world only"),
                                       (["--method", "ppo"], "method")])
def test_bad_arguments_are_refused_with_the_fix(argv, msg, capsys):
    assert main(argv) == 2
    assert msg in capsys.readouterr().err
