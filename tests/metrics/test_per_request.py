"""Derived latency columns and record-schema checks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from latsim.metrics.per_request import RECORD_COLUMNS, add_latencies

NAN = np.nan


def records() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": [0, 1, 2, 3],
            "replica": [0, 0, 1, 1],
            "arrival_s": [0.0, 1.0, 2.0, 3.0],
            "first_scheduled_s": [0.5, 1.0, NAN, 3.25],
            "first_token_s": [1.0, 1.5, NAN, 3.5],
            "finish_s": [3.0, 1.5, NAN, NAN],
            "input_tokens": [10, 20, 9000, 5],
            "output_tokens": [5, 1, 10, 8],
            "cached_tokens": [0, 16, 0, 0],
            "preemptions": [0, 0, 0, 1],
            "status": ["ok", "ok", "rejected", "unfinished"],
        }
    )


def test_derived_columns() -> None:
    out = add_latencies(records())
    np.testing.assert_allclose(out["ttft_s"], [1.0, 0.5, NAN, 0.5])
    np.testing.assert_allclose(out["tpot_s"], [0.5, NAN, NAN, NAN])
    np.testing.assert_allclose(out["e2e_s"], [3.0, 0.5, NAN, NAN])
    np.testing.assert_allclose(out["queue_s"], [0.5, 0.0, NAN, 0.25])


def test_input_is_not_modified() -> None:
    frame = records()
    add_latencies(frame)
    assert list(frame.columns) == list(RECORD_COLUMNS)


def test_missing_column() -> None:
    with pytest.raises(ValueError, match="records lack column 'finish_s'; expected request_id, replica"):
        add_latencies(records().drop(columns=["finish_s"]))


def test_unknown_status() -> None:
    frame = records()
    frame.loc[1, "status"] = "done"
    with pytest.raises(ValueError, match="unknown status 'done'; accepted: ok, rejected, unfinished"):
        add_latencies(frame)
