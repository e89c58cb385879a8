"""Run a grid of predictions in parallel into a parquet file, one row per point, resumable.

Where points run: in this process (``workers=1``), in local worker processes (``workers > 1``),
or on an existing Dask distributed cluster (``address``).  Results are appended to the output
file atomically every :data:`FLUSH_EVERY` finished points and at the end (also when
interrupted), so a rerun with the same grid and output skips the points already there.

A row holds the point's settings, ``point_id``, ``ttft_p50_ms``, ``ttft_p99_ms``,
``tpot_p50_ms``, ``tpot_p99_ms``, ``e2e_p99_ms``, ``throughput_rps``, ``stable`` (as in
:func:`latsim.plan.evaluate.evaluate`), ``p99`` intervals of TTFT/TPOT across ``replications``,
and ``error`` (the one-line message when the point could not be predicted, e.g. a model that
does not fit; its metrics are then empty).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from latsim.plan.grid import point_id

FLUSH_EVERY = 10
METRICS = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_p50_ms", "e2e_p99_ms",
           "ttft_p99_lo_ms", "ttft_p99_hi_ms", "tpot_p99_lo_ms", "tpot_p99_hi_ms", "throughput_rps",
           "output_tokens_per_s", "stable", "cost_model", "error")
CONNECT_TIMEOUT_S = 5.0


def run_point(point: dict[str, Any], replications: int = 1) -> dict[str, Any]:
    """Predict one grid point (seed ``point["seed"]``, default 0); never raises for a bad point:
    a ValueError becomes the row's ``error``."""
    from latsim.config import Settings
    from latsim.plan.evaluate import evaluate
    from latsim.scenario import build_deployment, merge

    row: dict[str, Any] = {"point_id": point_id(point), **point, **dict.fromkeys(METRICS)}
    try:
        settings = merge(Settings(**point), None)
        summary = evaluate(build_deployment(settings), settings, None, replications, settings.seed or 0)
    except ValueError as exc:
        row["error"] = str(exc).splitlines()[0]
        return row
    for metric in ("ttft", "tpot", "e2e"):
        block = summary[f"{metric}_ms"]
        row[f"{metric}_p50_ms"], row[f"{metric}_p99_ms"] = block["p50"], block["p99"]
        if metric != "e2e":
            row[f"{metric}_p99_lo_ms"], row[f"{metric}_p99_hi_ms"] = block["p99_ci95"]
    row.update(throughput_rps=summary["throughput_rps"], output_tokens_per_s=summary["output_tokens_per_s"],
               stable=summary["stable"], cost_model=summary["cost_model"])
    return row


def pending(points: list[dict[str, Any]], out: Path,
            restart: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(points still to run, rows already in out)``; ValueError when ``out`` holds another grid."""
    import pandas as pd

    if restart or not out.exists():
        return points, []
    try:
        done = pd.read_parquet(out)
    except Exception as exc:
        raise ValueError(f"{out} exists but is not a results parquet file ({type(exc).__name__}); "
                         "pass --restart to overwrite it") from None
    ids = {point_id(p) for p in points}
    if "point_id" not in done.columns or not set(done["point_id"]) <= ids:
        raise ValueError(f"{out} holds points that are not in this grid; pass --restart to overwrite it "
                         "or choose another --out")
    rows = [{str(k): v for k, v in r.items()} for r in done.to_dict("records")]
    finished = {r["point_id"] for r in rows}
    return [p for p in points if point_id(p) not in finished], rows


def sweep(points: list[dict[str, Any]], out: str | Path, *, workers: int = 1, address: str | None = None,
          replications: int = 1, restart: bool = False,
          progress: Callable[[int, int], None] | None = None) -> int:
    """Run ``points`` into ``out`` (module docstring); returns how many points ran now.
    ``progress(done, total)`` is called as points finish."""
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    if replications < 1:
        raise ValueError(f"--replications must be >= 1, got {replications}")
    target = Path(out)
    todo, rows = pending(points, target, restart)
    client = connect(address) if address else None  # fails fast, before any progress is shown
    total, ran = len(points), 0
    if progress:
        progress(len(rows), total)
    runner = _dask(client, todo, replications) if client else _local(workers, todo, replications)
    try:
        for row in runner:
            rows.append(row)
            ran += 1
            if progress:
                progress(len(rows), total)
            if ran % FLUSH_EVERY == 0:
                _write(rows, points, target)
    finally:
        if ran or not target.exists():
            _write(rows, points, target)
    return ran


def _local(workers: int, todo: list[dict[str, Any]], replications: int) -> Iterator[dict[str, Any]]:
    if workers == 1 or len(todo) <= 1:
        for point in todo:
            yield run_point(point, replications)
        return
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_point, p, replications) for p in todo]
        try:
            for future in as_completed(futures):
                yield future.result()
        finally:
            for future in futures:
                future.cancel()


def connect(address: str) -> Any:
    """A Dask client of the scheduler at ``address``; ValueError within :data:`CONNECT_TIMEOUT_S`
    seconds when none answers."""
    from distributed import Client

    if "://" not in address:
        raise ValueError(f"--address {address!r}: expected a scheduler address such as tcp://host:8786")
    try:
        return Client(address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise ValueError(f"--address {address}: no Dask scheduler answered within {CONNECT_TIMEOUT_S:g} s "
                         f"({type(exc).__name__}); start one with `dask scheduler` or drop --address") from None


def _dask(client: Any, todo: list[dict[str, Any]], replications: int) -> Iterator[dict[str, Any]]:
    from distributed import as_completed

    try:
        futures = client.map(run_point, todo, replications=replications, pure=False)
        for future in as_completed(futures):
            yield future.result()
    finally:
        client.close()


def _write(rows: list[dict[str, Any]], points: list[dict[str, Any]], target: Path) -> None:
    """All rows so far, in grid order, written atomically."""
    import pandas as pd

    from latsim.atomic import atomic_write

    order = {point_id(p): i for i, p in enumerate(points)}
    def position(row: dict[str, Any]) -> int:
        return order.get(str(row["point_id"]), len(order))

    ordered: list[dict[str, Any]] = sorted(rows, key=position)
    frame = pd.DataFrame(ordered)
    atomic_write(target, lambda f: frame.to_parquet(f, index=False))
