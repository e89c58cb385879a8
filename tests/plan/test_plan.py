"""``latsim plan``: the contract, ranking by cost, pruning by bounds, exit 3 when infeasible."""

from __future__ import annotations

import json

import pytest

from latsim.config import Settings
from latsim.plan.search import Options, Space, plan
from latsim.plan.slo import parse_slo
from latsim.scenario import build_deployment

SMALL = ["--model", "llama-3.2-1b", "--num-requests", "120", "--input-len", "200", "--output-len", "40",
         "--tps", "1", "--weight-dtypes", "bf16", "--replications", "2"]
CANDIDATE_KEYS = {"device", "tp", "replicas", "gpus", "weight_dtype", "ttft_ms", "tpot_ms", "e2e_ms", "meets_slo",
                  "p_meet", "binding", "max_rps_at_slo", "usd_per_hour", "usd_per_million_output_tokens",
                  "usd_per_million_tokens"}


def test_plan_json_contract_and_cheapest_first(cli) -> None:
    code, out, _ = cli("plan", *SMALL, "--qps", "4", "--devices", "h100,l40s", "--max-replicas", "2",
                       "--slo", "ttft_p99_ms=2000,tpot_p99_ms=200", "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["feasible"] is True
    assert set(answer["slo"]) == {"ttft_p99_ms", "tpot_p99_ms"}
    assert answer["workload"]["qps"] == 4
    for c in answer["candidates"]:
        assert set(c) >= CANDIDATE_KEYS
        assert set(c["ttft_ms"]) >= {"p50", "p99", "p99_ci95"}
        assert c["gpus"] == c["tp"] * c["replicas"]
    meeting = [c for c in answer["candidates"] if c["meets_slo"]]
    assert answer["best"] == meeting[0]
    assert [c["usd_per_hour"] for c in meeting] == sorted(c["usd_per_hour"] for c in meeting)
    best = answer["best"]
    assert best["max_rps_at_slo"] >= 4
    price = answer["prices"][best["device"]]["usd_per_gpu_hour"]
    assert best["usd_per_hour"] == pytest.approx(price * best["gpus"])
    out_tokens_per_hour = 4 * 40 * 3600
    assert best["usd_per_million_output_tokens"] == pytest.approx(best["usd_per_hour"] / out_tokens_per_hour * 1e6)


def test_price_override_changes_the_winner(cli) -> None:
    args = [*SMALL, "--qps", "2", "--devices", "h100,l40s", "--max-replicas", "1", "--no-rate-search",
            "--slo", "ttft_p99_ms=5000", "--json"]
    code, out, _ = cli("plan", *args, "--price", "h100=0.1")
    assert code == 0 and json.loads(out)["best"]["device"] == "h100"
    assert json.loads(out)["prices"]["h100"]["origin"] == "user"
    code, out, _ = cli("plan", *args, "--price", "l40s=0.1")
    assert code == 0 and json.loads(out)["best"]["device"] == "l40s"


def test_infeasible_exits_3_with_closest_candidates(cli, tmp_path) -> None:
    target = tmp_path / "plan.json"
    code, _out, err = cli("plan", *SMALL, "--qps", "2", "--devices", "l40s", "--max-replicas", "1",
                         "--no-rate-search", "--slo", "tpot_p99_ms=0.5", "--out", str(target))
    assert code == 3
    assert "no candidate meets the SLO" in err and "tpot_p99_ms" in err
    answer = json.loads(target.read_text())
    assert answer["feasible"] is False and answer["best"] is None
    assert answer["closest"] and answer["closest"][0]["binding"] == "tpot_p99_ms"


def test_bounds_prune_what_cannot_fit_or_keep_up() -> None:
    base = Settings(model="llama-3.1-70b", qps=50.0, input_len=1000, output_len=200, num_requests=100)
    answer = plan(base, Space(devices=("l40s",), tps=(1, 2), replicas=(1,), weight_dtypes=("bf16",)),
                  parse_slo("ttft_p99_ms=1000"), Options(replications=1, rate_search=False))
    reasons = {(p["tp"], p["reason"].split(":")[0]) for p in answer["pruned"]}
    assert reasons == {(1, "memory"), (2, "memory")}
    assert answer["candidates"] == [] and answer["feasible"] is False
    fast = plan(Settings(model="llama-3.2-1b", qps=1e5, input_len=1000, output_len=200, num_requests=100),
                Space(devices=("h100",), tps=(1,), replicas=(1,), weight_dtypes=("bf16",)),
                parse_slo("ttft_p99_ms=1000"), Options(replications=1, rate_search=False))
    assert [p["reason"].split(":")[0] for p in fast["pruned"]] == ["throughput"]


def test_rate_bound_is_above_what_the_simulator_serves() -> None:
    from latsim.plan.bounds import capacity_bounds
    from latsim.scenario import build_trace
    from latsim.sim.simulate import simulate

    s = Settings(model="llama-3.2-1b", device="h100", qps=500.0, input_len=200, output_len=40, num_requests=400)
    deployment = build_deployment(s)
    bound = capacity_bounds(deployment, 200, 40, 240).max_rps
    served = simulate(deployment, build_trace(s)).summary["throughput_rps"]
    assert served < bound


@pytest.mark.parametrize(("args", "words"), [
    (["--devices", "h1000"], "unknown device 'h1000'"),
    (["--slo", "ttft_p99.9_ms=5"], "does not exist"),
    (["--slo", "latency_p99_ms=5"], "does not exist"),
    (["--price", "b9000=1"], "unknown device 'b9000'"),
    (["--tps", "1,x"], "'x' is not a whole number"),
    (["--max-replicas", "0"], "--max-replicas must be >= 1"),
    (["--replications", "0"], "--replications must be >= 1"),
])
def test_bad_input_is_one_line_exit_2(cli, args, words) -> None:
    base = {"--slo": "ttft_p99_ms=1000", "--devices": "h100"}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    argv = [a for kv in base.items() for a in kv]
    code, _, err = cli("plan", "--model", "llama-3.2-1b", "--qps", "1", *argv)
    assert code == 2
    assert words in err and len(err.strip().splitlines()) == 1


def test_engine_knob_search_multiplies_the_space() -> None:
    from latsim.plan.search import ENGINE_KNOBS

    base = Settings(model="llama-3.2-1b", max_num_seqs=32)
    plain = Space(devices=("h100",), tps=(1,), replicas=(1,), weight_dtypes=("bf16",))
    knobs = Space(devices=("h100",), tps=(1,), replicas=(1,), weight_dtypes=("bf16",), engine_knobs=ENGINE_KNOBS)
    assert knobs.size() == len(ENGINE_KNOBS) * plain.size()
    combos = {(s.max_num_seqs, s.max_num_batched_tokens) for s in knobs.settings(base)}
    assert len(combos) == len(ENGINE_KNOBS)
    assert (32, None) in combos  # "engine default" keeps what the user gave
    with pytest.raises(ValueError, match="no devices"):
        Space(devices=())


def test_config_file_gives_model_and_workload_and_pins_device(cli, tmp_path) -> None:
    cfg = tmp_path / "d.yaml"
    cfg.write_text("model: llama-3.2-1b\ndevice: l40s\nworkload: {qps: 2, num_requests: 80, input_len: 128, "
                   "output_len: 16}\n")
    code, out, _ = cli("plan", "--config", str(cfg), "--tps", "1", "--max-replicas", "1", "--weight-dtypes", "bf16",
                       "--replications", "1", "--no-rate-search", "--slo", "ttft_p99_ms=5000", "--json")
    assert code == 0
    answer = json.loads(out)
    assert answer["model"] == "llama-3.2-1b" and answer["workload"]["qps"] == 2
    assert {c["device"] for c in answer["candidates"]} == {"l40s"}


def test_h200_candidates_are_also_checked_at_the_live_error_bands_slow_edge(cli) -> None:
    code, out, _ = cli("plan", *SMALL, "--qps", "2", "--devices", "h200,a100", "--max-replicas", "1",
                       "--no-rate-search", "--slo", "ttft_p99_ms=5000,itl_p90_ms=500", "--json")
    assert code == 0
    by_device = {c["device"]: c["meets_slo_at_live_edge"] for c in json.loads(out)["candidates"]}
    h200 = by_device["h200"]
    assert h200["meets"] is True and set(h200["values"]) == {"ttft_p99_ms"}  # no band for ITL p90
    assert by_device["a100"]["meets"] is None and "built from h200, h100 runs only" in by_device["a100"]["why"]


def test_rate_bound_ignores_a_vision_encoder_the_text_never_runs() -> None:
    from dataclasses import replace

    from latsim.plan.bounds import replica_rate_bound

    s = Settings(model="gemma-3-27b", device="h200", qps=1.0, input_len=200, output_len=40, num_requests=10)
    deployment = replace(build_deployment(s), weight_dtype="int4")
    text_only = replace(deployment, model=replace(deployment.model, encoder_params=0))
    assert deployment.model.encoder_params > 0
    one_sequence = 201  # KV room for one prompt: the bandwidth bound binds
    assert replica_rate_bound(deployment, 200, 40, one_sequence) == replica_rate_bound(text_only, 200, 40, one_sequence)
