"""Held-out splits: training-only rows join every fold's training but never the held-out side."""

from __future__ import annotations

import pandas as pd
import pytest

from latsim.predict import heldout


class _Recorder:
    def __init__(self) -> None:
        self.trained: list[set[int]] = []

    def fit(self, frame: pd.DataFrame, feats: pd.DataFrame, **_: float):
        self.trained.append(set(frame["id"]))
        recorder = self

        class Model:
            def predict_static(self, static: pd.DataFrame, qps) -> pd.DataFrame:
                return pd.DataFrame({"fold": len(recorder.trained)}, index=static.index)

        return Model()


@pytest.fixture
def recorder(monkeypatch) -> _Recorder:
    rec = _Recorder()
    monkeypatch.setattr("latsim.predict.surrogate.fit_surrogate", rec.fit)
    monkeypatch.setattr("latsim.predict.features.features_at", lambda static, qps: static)
    return rec


def _rows(ids: list[int], models: list[str]) -> pd.DataFrame:
    return pd.DataFrame({"id": ids, "model": models, "device": "h100", "qps": 1.0})


@pytest.mark.parametrize("split", ["configuration", "model_family"])
def test_training_only_rows_train_every_fold_but_the_held_out_familys(recorder, split):
    frame = _rows(list(range(10)), ["llama-3.1-8b", "qwen2.5-7b"] * 5)
    extra = _rows([100, 101], ["llama-3.1-8b", "qwen2.5-7b"])
    out = heldout.cross_predict(frame, frame, split, extra=(extra, extra))
    assert list(out.index) == list(frame.index)  # only the scored rows are predicted
    for trained in recorder.trained:
        held_out = set(range(10)) - trained
        assert held_out  # each fold holds some rows out
        if split == "configuration":
            assert {100, 101} <= trained
        else:  # the held-out family's training-only row is left out with it
            family = set(frame.loc[frame["id"].isin(held_out), "model"])
            assert trained & {100, 101} == ({101} if family == {"llama-3.1-8b"} else {100})
