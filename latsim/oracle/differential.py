"""Differential testing of latsim's scheduler against vLLM's own, step by step.

Two halves.  The oracle runs in another python, the vLLM reference environment
(``.ci/vllm-ref.sh``): :func:`oracle_records` sends a whole batch of :class:`Case` objects to
``scripts/run_differential.py`` in one process and reads back one ``StepRecord`` list per case.
The comparison runs here: :func:`latsim_records` steps latsim's scheduler over the same case,
:func:`compare` lists every :class:`Difference`, and :func:`report` explains the first one with
the steps around it.  ``docs/differential-findings.md`` lists the differences found so far.

Recording conventions are normalised here, never in the engine (:func:`normalise`): latsim's
runner lists a cache hit of 0 for every admitted request, the adapter only hits > 0.  Both
sides get the same knobs, ``num_gpu_blocks`` included: it counts vLLM's reserved null block
(as vLLM's log and latsim's memory plan do), so latsim using all of them is a semantic
difference (finding F1), not a convention.  A :class:`Case` may override knobs for one side
only (``oracle`` or ``latsim``), which is how a test neutralises a known semantic difference
to look past it.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from latsim.oracle.steprecord import StepRecord, StreamRequest

REPO_ROOT = Path(__file__).resolve().parents[2]
BRIDGE = REPO_ROOT / "scripts" / "run_differential.py"
LOCAL_REFERENCE = Path("/work/vllm-ref/bin/python")
CACHED_REFERENCE = Path.home() / ".cache" / "latsim" / "vllm-ref" / "bin" / "python"
FIELDS = ("scheduled", "new", "preempted", "finished", "rejected", "cached_tokens")


class OracleError(RuntimeError):
    """The reference python is missing, crashed, or refused a case."""


@dataclass(frozen=True)
class Case:
    """One stream and the engine knobs to run it with on both sides.

    ``config`` holds keyword arguments of ``run_vllm_scheduler`` (``num_gpu_blocks`` counts
    vLLM's null block); ``oracle`` and ``latsim`` override them for one side only.
    """

    stream: tuple[StreamRequest, ...]
    config: Mapping[str, Any]
    oracle: Mapping[str, Any] = field(default_factory=dict)
    latsim: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""

    def to_json(self) -> dict[str, Any]:
        stream = [
            [r.request_id, r.arrival_step, r.prompt_tokens, r.output_tokens, r.prefix_group, r.prefix_tokens]
            for r in self.stream
        ]
        return {"stream": stream, "config": {**self.config, **self.oracle}}


# --- the oracle (vLLM's scheduler, in the reference python) -------------------------------


def reference_python() -> Path | None:
    """The vLLM reference python: ``$LATSIM_VLLM_REF_PYTHON``, else a known location, else None."""
    env = os.environ.get("LATSIM_VLLM_REF_PYTHON")
    if env:
        return Path(env)
    for candidate in (LOCAL_REFERENCE, CACHED_REFERENCE):
        if candidate.exists():
            return candidate
    return None


def oracle_records(
    cases: Sequence[Case], python: str | Path | None = None, jobs: int | None = None, timeout: float = 1800
) -> list[list[StepRecord]]:
    """vLLM's records for every case, from ONE run of the reference python.

    Raises :class:`OracleError` when there is no reference python, when it fails, or when vLLM
    refuses a case (the message names the case).
    """
    return [records for records, _ in oracle_run(cases, python, jobs, timeout)]


def oracle_run(
    cases: Sequence[Case], python: str | Path | None = None, jobs: int | None = None, timeout: float = 1800
) -> list[tuple[list[StepRecord], float]]:
    """Like :func:`oracle_records`, with the seconds vLLM's scheduler took for each case."""
    cmd = _bridge_command(python, jobs)
    payload = json.dumps([c.to_json() for c in cases])
    proc = subprocess.run(cmd, input=payload, capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise OracleError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{proc.stderr[-4000:]}")
    return _parse_results(cases, json.loads(proc.stdout)["results"])


def _bridge_command(python: str | Path | None, jobs: int | None, serve: bool = False) -> list[str]:
    python = python or reference_python()
    if python is None or not Path(python).exists():
        raise OracleError(
            f"no vLLM reference python (looked at $LATSIM_VLLM_REF_PYTHON, {LOCAL_REFERENCE}, "
            f"{CACHED_REFERENCE}); build it with: LATSIM_VLLM_REF_PYTHON=$(bash .ci/vllm-ref.sh)"
        )
    return [str(python), str(BRIDGE)] + ([f"--jobs={jobs}"] if jobs else []) + (["--serve"] if serve else [])


class OracleSession:
    """One long-lived reference python answering many batches (``with OracleSession() as o``).

    For interactive work such as shrinking a failing stream; tests use :func:`oracle_records`.
    """

    def __init__(self, python: str | Path | None = None, jobs: int | None = None) -> None:
        self.cmd = _bridge_command(python, jobs, serve=True)
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> OracleSession:
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=60)

    def records(self, cases: Sequence[Case]) -> list[list[StepRecord]]:
        assert self.proc is not None and self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps([c.to_json() for c in cases]) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise OracleError(f"{' '.join(self.cmd)} exited with {self.proc.wait()}")
        return [records for records, _ in _parse_results(cases, json.loads(line)["results"])]


def _parse_results(cases: Sequence[Case], results: list[dict[str, Any]]) -> list[tuple[list[StepRecord], float]]:
    out = []
    for i, (case, res) in enumerate(zip(cases, results, strict=True)):
        if "error" in res:
            raise OracleError(f"case {i} {case.label!r}: vLLM refused it: {res['error']}")
        out.append(([record_from_json(r) for r in res["records"]], res["seconds"]))
    return out


def record_from_json(obj: Mapping[str, Any]) -> StepRecord:
    return StepRecord(
        step=obj["step"],
        scheduled=tuple((rid, n) for rid, n in obj["scheduled"]),
        new=tuple(obj.get("new", ())),
        preempted=tuple(obj.get("preempted", ())),
        finished=tuple(obj.get("finished", ())),
        rejected=tuple(obj.get("rejected", ())),
        cached_tokens=dict(obj.get("cached_tokens", {})),
    )


# --- latsim's side -------------------------------------------------------------------------

# Knobs of the oracle that cannot change a scheduling decision (model shape, token ids).
_INERT = {"seed", "num_kv_heads", "head_dim"}
# vLLM's defaults of the knobs latsim's runner may not take: latsim behaves as if they were set.
_ORACLE_DEFAULTS = {
    "async_scheduling": False,
    "long_prefill_token_threshold": 0,
    "watermark": 0.0,
    "scheduler_reserve_full_isl": True,
}


def latsim_records(case: Case) -> list[StepRecord]:
    """latsim's records for ``case`` (``run_latsim_scheduler`` with the case's knobs).

    A knob latsim's runner does not take is dropped when it has vLLM's default value (then it
    describes what latsim should do, which a finding may say it does not); any other value
    raises ``NotImplementedError`` naming it (e.g. ``watermark=0.1``).
    """
    from latsim.oracle.stream import run_latsim_scheduler

    accepted = set(inspect.signature(run_latsim_scheduler).parameters)
    kwargs = {}
    for key, value in {**case.config, **case.latsim}.items():
        if key in accepted:
            kwargs[key] = value
        elif key not in _INERT and _ORACLE_DEFAULTS.get(key, object()) != value:
            raise NotImplementedError(f"latsim's scheduler runner has no {key}={value!r}")
    return run_latsim_scheduler(list(case.stream), **kwargs)


# --- comparison ----------------------------------------------------------------------------


def normalise(records: Sequence[StepRecord]) -> list[StepRecord]:
    """Records in the one convention :func:`compare` expects: cache hits listed only when > 0."""
    out = []
    for r in records:
        if any(v <= 0 for v in r.cached_tokens.values()):
            r = StepRecord(r.step, r.scheduled, r.new, r.preempted, r.finished, r.rejected,
                           {k: v for k, v in r.cached_tokens.items() if v > 0})
        out.append(r)
    return out


@dataclass(frozen=True)
class Difference:
    """One field of one step on which the two schedulers disagree (``step == -1``: run length)."""

    step: int
    field: str
    detail: str
    latsim: Any
    vllm: Any

    def __str__(self) -> str:
        where = "run length" if self.step < 0 else f"step {self.step} {self.field}"
        return f"{where}: {self.detail}"


def compare(latsim: Sequence[StepRecord], vllm: Sequence[StepRecord]) -> list[Difference]:
    """Every per-step difference, in step order (then field order); empty when identical."""
    latsim, vllm = normalise(latsim), normalise(vllm)
    diffs = []
    for a, b in zip(latsim, vllm, strict=False):
        for name in FIELDS:
            detail = _field_difference(name, getattr(a, name), getattr(b, name))
            if detail:
                diffs.append(Difference(b.step, name, detail, getattr(a, name), getattr(b, name)))
    if len(latsim) != len(vllm):
        diffs.append(Difference(-1, "steps", f"latsim ran {len(latsim)} steps, vLLM {len(vllm)}",
                                len(latsim), len(vllm)))
    return diffs


def _field_difference(name: str, a: Any, b: Any) -> str:
    if a == b:
        return ""
    if name == "scheduled":
        return _scheduled_difference(dict(a), dict(b)) or "same requests and tokens, different order"
    if name == "cached_tokens":
        keys = sorted(set(a) | set(b))
        return ", ".join(f"{k}: latsim {a.get(k, 0)} vs vLLM {b.get(k, 0)}" for k in keys if a.get(k) != b.get(k))
    if set(a) == set(b):
        return f"same requests, different order: latsim {list(a)} vs vLLM {list(b)}"
    return _set_difference(set(a), set(b))


def _scheduled_difference(a: dict[str, int], b: dict[str, int]) -> str:
    parts = []
    if set(a) != set(b):
        parts.append(_set_difference(set(a), set(b)))
    tokens = [f"{k}: latsim {a[k]} vs vLLM {b[k]}" for k in a if k in b and a[k] != b[k]]
    if tokens:
        parts.append("tokens " + ", ".join(tokens[:6]) + (" ..." if len(tokens) > 6 else ""))
    return "; ".join(parts)


def _set_difference(a: set[str], b: set[str]) -> str:
    parts = []
    if a - b:
        parts.append(f"only latsim {sorted(a - b)}")
    if b - a:
        parts.append(f"only vLLM {sorted(b - a)}")
    return ", ".join(parts)


def format_step(rec: StepRecord | None, width: int = 12) -> str:
    """One step on one line: ``r0:512 r1:1 | new r1(c16) | pre r2 | fin r0 | rej r3``."""
    if rec is None:
        return "(no step)"
    items = [f"{rid}:{n}" for rid, n in rec.scheduled]
    text = " ".join(items[:width]) + (f" ... ({len(items)} reqs, {rec.total_tokens} tok)" if len(items) > width else "")
    text = text or "idle"
    if rec.new:
        text += " | new " + " ".join(f"{r}(c{rec.cached_tokens[r]})" if rec.cached_tokens.get(r) else r
                                     for r in rec.new)
    for label, ids in (("pre", rec.preempted), ("fin", rec.finished), ("rej", rec.rejected)):
        if ids:
            text += f" | {label} " + " ".join(ids)
    return text


def report(latsim: Sequence[StepRecord], vllm: Sequence[StepRecord], context: int = 2,
           case: Case | None = None) -> str:
    """A few lines explaining the first difference, with ``context`` steps either side."""
    diffs = compare(latsim, vllm)
    if not diffs:
        return "identical"
    first = diffs[0]
    latsim, vllm = normalise(latsim), normalise(vllm)
    lines = []
    if case is not None:
        lines.append(f"case {case.label!r}: {case.config} oracle={dict(case.oracle)} latsim={dict(case.latsim)}")
        lines.append(f"stream ({len(case.stream)} requests): " + " ".join(_format_request(r) for r in case.stream[:12])
                     + (" ..." if len(case.stream) > 12 else ""))
    lines.append(f"{len(diffs)} difference(s); first: {first}")
    center = first.step if first.step >= 0 else min(len(latsim), len(vllm))
    for s in range(max(0, center - context), center + context + 1):
        if s >= len(latsim) and s >= len(vllm):
            break
        mark = ">>" if s == first.step else "  "
        lines.append(f"{mark} step {s:4d} latsim: {format_step(latsim[s] if s < len(latsim) else None)}")
        lines.append(f"{mark}           vLLM: {format_step(vllm[s] if s < len(vllm) else None)}")
    return "\n".join(lines)


def _format_request(r: StreamRequest) -> str:
    group = f" g{r.prefix_group}/{r.prefix_tokens}" if r.prefix_group >= 0 else ""
    return f"{r.request_id}@{r.arrival_step}({r.prompt_tokens}+{r.output_tokens}{group})"


def check_cases(cases: Sequence[Case], oracle: Sequence[Sequence[StepRecord]]) -> list[str]:
    """Reports of the cases on which latsim and the oracle differ (empty: all identical)."""
    failures = []
    for case, expected in zip(cases, oracle, strict=True):
        got = latsim_records(case)
        if compare(got, expected):
            failures.append(report(got, expected, case=case))
    return failures


def shrink(case: Case, oracle: OracleSession, same_failure: bool = True, rounds: int = 50) -> Case:
    """A smaller case on which latsim and vLLM still differ (greedy delta debugging).

    Tries dropping each request, then halving prompt and output lengths, then shrinking the
    pool, keeping any change after which a difference remains (of the same field at the first
    differing step when ``same_failure``). Each round is one oracle batch.
    """

    def signature(c: Case, expected: list[StepRecord]) -> str | None:
        diffs = compare(latsim_records(c), expected)
        return diffs[0].field if diffs else None

    target = signature(case, oracle.records([case])[0])
    if target is None:
        return case
    for _ in range(rounds):
        candidates = _smaller(case)
        if not candidates:
            break
        found = None
        for cand, expected in zip(candidates, oracle.records(candidates), strict=True):
            sig = signature(cand, expected)
            if sig is not None and (sig == target or not same_failure):
                found = cand
                break
        if found is None:
            break
        case = found
    return case


def _smaller(case: Case) -> list[Case]:
    stream = list(case.stream)
    out = [replace(case, stream=(*stream[:i], *stream[i + 1:])) for i in range(len(stream))]
    for i, r in enumerate(stream):
        changes: list[dict[str, Any]] = [
            dict(prompt_tokens=r.prompt_tokens // 2), dict(output_tokens=r.output_tokens // 2),
            dict(prompt_tokens=r.prompt_tokens - 1), dict(output_tokens=r.output_tokens - 1),
            dict(arrival_step=r.arrival_step - 1), dict(prefix_group=-1, prefix_tokens=0),
        ]
        for change in changes:
            new = replace(r, **change)
            if new != r and new.prompt_tokens >= 1 and new.output_tokens >= 1 and new.arrival_step >= 0:
                new = replace(new, prefix_tokens=min(new.prefix_tokens, new.prompt_tokens))
                out.append(replace(case, stream=(*stream[:i], new, *stream[i + 1:])))
    blocks = case.config.get("num_gpu_blocks", 0)
    if blocks > -(-case.config["max_model_len"] // case.config.get("block_size", 16)):
        oracle = dict(case.oracle)
        if "num_gpu_blocks" in oracle:
            oracle["num_gpu_blocks"] -= 1
        out.append(replace(case, config={**case.config, "num_gpu_blocks": blocks - 1}, oracle=oracle))
    return out
