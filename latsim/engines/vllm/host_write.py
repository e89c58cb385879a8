"""Write measured or fitted terms into vLLM's host-terms file (``latsim/data/engines/vllm/host.yaml``).

The file holds data only: per engine, ``host_reference_probe_s`` (and the probe's spread over
the live runs, ``host_probe_p10_s`` / ``host_probe_p90_s``) and one entry per kind of
GPU-only model (``calibrated``, ``roofline``) with its terms (:data:`latsim.costmodel.host.TERMS`,
or ``cpu_terms_from: <kind>``).  Each mapping that holds terms has a ``provenance`` mapping with
one record (:func:`latsim.provenance.record`) per script that wrote terms there, keyed by the
script's name; the record's ``terms`` lists what it set.  ``docs/step-time-model.md`` explains
the terms and the scripts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from latsim.atomic import atomic_write_text
from latsim.costmodel.host import TERMS
from latsim.engines.vllm.host_terms import CPU_FIELDS, HOST_TERMS_KEY, REQUIRED_FIELDS, host_overhead_in
from latsim.paths import engine_data
from latsim.provenance import display_path, plain, record, same_computation

ENGINE_TERMS = ("host_reference_probe_s", "host_probe_p10_s", "host_probe_p90_s")
"""Terms of an engine as a whole (not of one kind of GPU model)."""
HEADER = (
    "# vLLM's host-side step terms, read by latsim/engines/vllm/host_terms.py.  Written by\n"
    "# scripts/host_steps.py, scripts/launch_gaps.py and scripts/fit_engine_host.py (--write), each\n"
    "# entry with the provenance of its terms; docs/step-time-model.md explains them.\n"
)


def shipped_path() -> Path:
    """The host-terms file latsim ships."""
    return engine_data("vllm", "host.yaml")


def read(path: str | Path) -> dict[str, Any]:
    """The parsed file (an empty mapping when it does not exist); ValueError if it is not a mapping."""
    p = Path(path)
    if not p.exists():
        return {}
    data = yaml.safe_load(p.read_text())
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping at the top, got {type(data).__name__}")
    return data


def write_terms(path: str | Path, terms: Mapping[str, float], record: Mapping[str, Any], *,
                script: str, entry: str | None, engine: str = HOST_TERMS_KEY,
                supersedes: tuple[str, ...] = ()) -> bool:
    """Set ``terms`` in ``engines/<engine>/<entry>`` (``entry`` None: the engine's own mapping,
    :data:`ENGINE_TERMS` only) and ``provenance/<script>`` there to ``record`` plus the list of
    terms; write the file atomically, unless the terms and the record (but for its volatile keys)
    are what the file already holds.  Returns whether the file was written.

    A record there of a script named in ``supersedes`` whose every term is written now no longer
    describes a value in the file: it moves into the new record, under ``replaces`` (kept there
    when the script writes again).  When the script rewrites only some of the terms its previous
    record set, that record stays, for the others, under the new record's ``earlier`` (its
    ``terms`` narrowed to them), so every value keeps the record of the run that wrote it.

    ValueError (naming the term) for a term that does not belong there, a value that is not a
    finite number >= 0, a CPU term written into an entry that takes them from another
    (``cpu_terms_from``), or an update that leaves the entry unreadable by the loader.
    """
    _check_terms(terms, entry)
    data = read(path)
    engines = _child(data, "engines", str(path))
    target = _child(_child(engines, engine, f"engines/{engine}"), entry, f"engines/{engine}/{entry}") \
        if entry is not None else _child(engines, engine, f"engines/{engine}")
    if entry is not None and "cpu_terms_from" in target:
        shared = sorted(set(terms) & set(CPU_FIELDS))
        if shared:
            raise ValueError(f"entry {entry!r} takes its CPU terms from {target['cpu_terms_from']!r}: "
                             f"cannot write {', '.join(shared)} there")
    new_record = plain({"terms": list(terms), **record})
    provenance = _child(target, "provenance", f"engines/{engine}/{entry}/provenance")
    replaced = {name: provenance[name] for name in supersedes
                if name in provenance and set(provenance[name].get("terms", [])) <= set(terms)}
    replaced = replaced or (provenance.get(script) or {}).get("replaces", {})
    if replaced:
        new_record["replaces"] = replaced
    earlier = _earlier(provenance.get(script), set(terms))
    if earlier:
        new_record["earlier"] = earlier
    unchanged = all(target.get(name) == float(value) for name, value in terms.items()) \
        and same_computation(provenance.get(script), new_record)
    if unchanged:
        return False
    target.update({name: float(value) for name, value in terms.items()})
    for name in replaced:
        provenance.pop(name, None)
    provenance[script] = new_record
    target["provenance"] = target.pop("provenance")  # the terms first, their provenance after
    if entry is not None:
        _check_loadable(data, engine, entry)
    atomic_write_text(path, dump(data))
    return True


def _earlier(previous: Mapping[str, Any] | None, written: set[str]) -> dict[str, Any] | None:
    """The part of a script's previous record (and of the records it kept) that still describes
    a term not in ``written``: the record with its ``terms`` narrowed to those; None if none is left."""
    if not previous:
        return None
    kept = [t for t in previous.get("terms", []) if t not in written]
    older = _earlier(previous.get("earlier"), written | set(kept))
    if not kept:
        return older
    out = {k: v for k, v in previous.items() if k not in ("earlier", "replaces")}
    out["terms"] = kept
    if older:
        out["earlier"] = older
    return out


def write_or_exit(path: Path, terms: Mapping[str, float], inputs: Mapping[str, Any], results: Mapping[str, Any],
                  *, script: str, entry: str | None = "calibrated", supersedes: tuple[str, ...] = ()) -> None:
    """A script's ``--write``: :func:`write_terms` with the provenance record of ``inputs`` and
    ``results`` (:func:`latsim.provenance.record`, the file itself left out of the inputs); prints
    whether the file was written; SystemExit naming the file for what :func:`write_terms` refuses."""
    try:
        written = write_terms(path, terms, record(inputs, results, exclude=path), script=script, entry=entry,
                              supersedes=supersedes)
    except ValueError as exc:
        raise SystemExit(f"{display_path(path)}: {exc}") from None
    print(f"{display_path(path)}: {'written' if written else 'unchanged'} ({', '.join(terms)})")


class _Dumper(yaml.SafeDumper):
    """Block style, but a list of plain scalars on one line (``[2, 4, 8]``)."""


def _represent_list(dumper: yaml.SafeDumper, value: list) -> yaml.Node:
    flow = all(isinstance(v, (int, float, str)) for v in value)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", value, flow_style=flow)


_Dumper.add_representer(list, _represent_list)


def dump(data: Mapping[str, Any]) -> str:
    """The file's text: :data:`HEADER`, then ``data`` as YAML in insertion order."""
    return HEADER + yaml.dump(dict(data), Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def _check_terms(terms: Mapping[str, float], entry: str | None) -> None:
    allowed = TERMS if entry is not None else ENGINE_TERMS
    if not terms:
        raise ValueError("no terms to write")
    for name, value in terms.items():
        if name not in allowed:
            where = f"entry {entry!r}" if entry is not None else "the engine's own mapping"
            raise ValueError(f"term {name!r} cannot be written to {where}; accepted: {', '.join(allowed)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"term {name}={value!r}: expected a finite number >= 0")


def _child(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """``parent[key]``, created empty when missing; ValueError if it is not a mapping."""
    child = parent.setdefault(key, {})
    if not isinstance(child, dict):
        raise ValueError(f"{where} is a {type(child).__name__}, expected a mapping")
    return child


def _check_loadable(data: Mapping[str, Any], engine: str, entry: str) -> None:
    """The loader must read an entry that has (or borrows) every required term."""
    target = data["engines"][engine][entry]
    donor = data["engines"][engine].get(str(target.get("cpu_terms_from")), {}) if "cpu_terms_from" in target else {}
    if all(name in target or name in donor for name in REQUIRED_FIELDS):
        host_overhead_in(data, entry, engine)
