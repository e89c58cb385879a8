"""Length distributions: moments, clipping, files, describe() round trips and errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from latsim.workload.lengths import (
    Choice,
    Fixed,
    LengthDistribution,
    LogNormal,
    Normal,
    Uniform,
    parse_lengths,
)

N = 20_000


def draw(spec: str | int, n: int = N, seed: int = 0) -> np.ndarray:
    return parse_lengths(spec).sample(n, np.random.default_rng(seed))


@pytest.mark.parametrize("spec", [200, "200", " fixed:200 ", np.int64(200)])
def test_fixed_forms(spec: object) -> None:
    dist = parse_lengths(spec)  # type: ignore[arg-type]
    assert dist == Fixed(200) and dist.mean() == 200.0
    np.testing.assert_array_equal(dist.sample(3, np.random.default_rng(0)), [200, 200, 200])


def test_uniform_is_inclusive_on_both_ends() -> None:
    x = draw("uniform:min=10,max=13")
    assert set(np.unique(x)) == {10, 11, 12, 13}
    assert x.mean() == pytest.approx(parse_lengths("uniform:min=10,max=13").mean(), rel=0.01)


def test_lognormal_median_and_mean_unclipped() -> None:
    dist = parse_lengths("lognormal:median=600,sigma=0.8")
    x = dist.sample(N, np.random.default_rng(3))
    assert np.median(x) == pytest.approx(600, rel=0.03)
    assert dist.mean() == pytest.approx(600 * np.exp(0.32), rel=1e-12)
    assert x.mean() == pytest.approx(dist.mean(), rel=0.03)


def test_lognormal_clipping_puts_mass_on_the_bounds() -> None:
    dist = parse_lengths("lognormal:median=600,sigma=1.5,min=100,max=2000")
    x = dist.sample(N, np.random.default_rng(4))
    assert x.min() == 100 and x.max() == 2000
    assert np.mean(x == 100) > 0.05 and np.mean(x == 2000) > 0.1
    assert x.mean() == pytest.approx(dist.mean(), rel=0.02)


def test_normal_is_clipped_at_one_by_default_and_mean_matches() -> None:
    dist = parse_lengths("normal:mean=10,std=20,max=30")
    x = dist.sample(200_000, np.random.default_rng(5))
    assert x.min() == 1 and x.max() == 30
    assert x.mean() == pytest.approx(dist.mean(), abs=0.1)


def test_choice_draws_only_listed_values_about_equally() -> None:
    x = draw("choice:128,512,2048")
    values, counts = np.unique(x, return_counts=True)
    np.testing.assert_array_equal(values, [128, 512, 2048])
    np.testing.assert_allclose(counts / N, 1 / 3, atol=0.02)
    assert parse_lengths("choice:128,512,2048").mean() == pytest.approx(896.0)


@pytest.mark.parametrize(
    "dist",
    [
        Fixed(7),
        Uniform(1, 9),
        LogNormal(600.0, 0.8),
        LogNormal(600.0, 0.8, min=16, max=4096),
        LogNormal(12.5, 0.25, max=20),
        Normal(500.0, 100.0),
        Normal(-3.5, 2.0, min=2, max=8),
        Choice((128, 512, 2048)),
    ],
)
def test_describe_round_trips(dist: LengthDistribution) -> None:
    assert parse_lengths(dist.describe()) == dist


def test_distribution_instance_passes_through() -> None:
    dist = Uniform(3, 4)
    assert parse_lengths(dist) is dist


def test_same_seed_same_lengths() -> None:
    spec = "lognormal:median=300,sigma=1,max=4000"
    np.testing.assert_array_equal(draw(spec, 100, seed=9), draw(spec, 100, seed=9))
    assert not np.array_equal(draw(spec, 100, seed=9), draw(spec, 100, seed=10))


@settings(max_examples=60, deadline=None)
@given(
    spec=st.sampled_from([
        "1", "uniform:min=1,max=3", "lognormal:median=2,sigma=3", "lognormal:median=5000,sigma=2,max=8000",
        "normal:mean=-50,std=10", "normal:mean=3,std=100", "choice:1,2,99",
    ]),
    n=st.integers(0, 200),
    seed=st.integers(0, 2**32 - 1),
)
def test_samples_are_int64_and_at_least_one(spec: str, n: int, seed: int) -> None:
    x = draw(spec, n, seed)
    assert x.dtype == np.int64 and x.shape == (n,)
    assert n == 0 or x.min() >= 1


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("lognormal:median=600,sigma=-1", r"lognormal: sigma must be > 0, got -1"),
        ("lognormal:median=0,sigma=1", r"lognormal: median must be > 0, got 0"),
        ("lognormal:median=600", r"lognormal: missing sigma; accepted keys: median, sigma, min \(optional\)"),
        ("lognormal:median=600,sigma=1,min=0", r"lognormal: min must be an integer >= 1, got 0"),
        ("lognormal:median=600,sigma=1,min=10,max=5", r"lognormal: max must be >= min, got min=10, max=5"),
        ("lognormal:median=600,sigma=1,mode=3", r"lognormal: unknown key 'mode'"),
        ("normal:mean=5,std=0", r"normal: std must be > 0, got 0"),
        ("normal:mean=x,std=1", r"normal: mean must be a number, got 'x'"),
        ("uniform:min=5", r"uniform: missing max"),
        ("uniform:min=1.5,max=3", r"uniform: min must be an integer >= 1, got 1.5"),
        ("uniform:min=9,max=3", r"uniform: max must be >= min, got min=9, max=3"),
        ("fixed:0", r"fixed: value must be an integer >= 1, got 0"),
        ("fixed:1,2", r"fixed: expected one value"),
        ("0", r"fixed: value must be an integer >= 1, got 0"),
        ("-5", r"fixed: value must be an integer >= 1, got -5"),
        ("choice:", r"choice: expected at least one value"),
        ("choice:1,,3", r"choice: empty item"),
        ("choice:128,0", r"choice: every value must be an integer >= 1, got 0"),
        ("zipf:a=2", r"unknown length distribution 'zipf'.*accepted: N, fixed:N, uniform:min=A,max=B"),
        ("empirical:", r"empirical: expected a file"),
    ],
)
def test_bad_spec_names_the_bad_part(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_lengths(spec)


@pytest.mark.parametrize("spec", [True, 0, -3, 2.5])
def test_bad_non_string_specs(spec: object) -> None:
    with pytest.raises(ValueError):
        parse_lengths(spec)  # type: ignore[arg-type]


def test_negative_sample_count() -> None:
    with pytest.raises(ValueError, match="number of samples must be an integer >= 0, got -2"):
        Fixed(3).sample(-2, np.random.default_rng(0))


# --- empirical files -------------------------------------------------------------------------


def test_empirical_text_file_resamples_its_values(tmp_path: Path) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text("# measured prompt lengths\n10 20\n\n30,40\n")
    dist = parse_lengths(f"empirical:{path}")
    assert dist.mean() == 25.0 and dist.describe() == f"empirical:{path}"
    x = dist.sample(4000, np.random.default_rng(0))
    assert set(np.unique(x)) == {10, 20, 30, 40}


def test_empirical_csv_column_and_single_column(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0.0,100,7\n0.5,300,9\n")
    assert parse_lengths(f"empirical:{trace}#output_tokens").mean() == 8.0
    single = tmp_path / "one.csv"
    single.write_text("tokens\n5\n15\n")
    assert parse_lengths(f"empirical:{single}").mean() == 10.0


def test_empirical_json_and_gz(tmp_path: Path) -> None:
    plain = tmp_path / "l.json"
    plain.write_text(json.dumps([1, 2, 3.0]))
    assert parse_lengths(f"empirical:{plain}").mean() == 2.0
    records = tmp_path / "r.json.gz"
    with gzip.open(records, "wt") as f:
        json.dump([{"n": 4}, {"n": 8}], f)
    assert parse_lengths(f"empirical:{records}#n").mean() == 6.0


@pytest.mark.parametrize(
    ("name", "content", "suffix", "message"),
    [
        ("bad.txt", "10\n20\nabc\n", "", r"bad.txt:3: expected a whole-number length >= 1, got 'abc'"),
        ("zero.txt", "# c\n5\n0\n", "", r"zero.txt:3: expected a whole-number length >= 1, got '0'"),
        ("frac.txt", "5 2.5\n", "", r"frac.txt:1: .*got '2.5'"),
        ("empty.txt", "# nothing\n\n", "", r"empty.txt: holds no lengths"),
        ("multi.csv", "a,b\n1,2\n", "", r"multi.csv:1: several columns \['a', 'b'\]: pick one with PATH#"),
        ("multi2.csv", "a,b\n1,2\n", "#c", r"multi2.csv:1: no column 'c'"),
        ("short.csv", "a,b\n1,2\n3\n", "#a", r"short.csv:3: expected 2 fields"),
        ("nohead.txt", "1\n2\n", "#a", r"nohead.txt:1: column 'a' requested but there is no header"),
        ("obj.json", '{"a": 1}', "", r"obj.json:1: expected a JSON array"),
        ("broken.json", "[1, 2,\n oops]", "", r"broken.json:2: invalid JSON"),
        ("neg.json", "[3, -1]", "", r"neg.json: entry 2: expected a whole-number length >= 1, got -1"),
        ("bool.json", "[3, true]", "", r"bool.json: entry 2: .*got True"),
        ("key.json", '[{"n": 1}, {"m": 2}]', "#n", r"key.json: entry 2: expected an object with key 'n'"),
    ],
)
def test_empirical_errors_name_file_and_line(
    tmp_path: Path, name: str, content: str, suffix: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        parse_lengths(f"empirical:{path}{suffix}")


def test_empirical_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        parse_lengths(f"empirical:{tmp_path / 'nope.txt'}")


def test_unbounded_draws_are_capped_so_int64_is_exact() -> None:
    from latsim.workload.lengths import MAX_LENGTH

    x = draw("lognormal:median=600,sigma=40", 1000)
    assert x.min() >= 1 and x.max() == MAX_LENGTH
