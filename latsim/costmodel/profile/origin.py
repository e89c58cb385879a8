"""Where a profile's numbers come from, in one line: measured here, imported, or none (roofline).

Used by ``latsim devices`` (:func:`status`) and by the calibrated cost model's ``describe()``
and label (:func:`origin`).  Engine-version drift: a profile's kernels are priced as they were
measured, with whatever vLLM version measured them; when that differs from the engine latsim
models (:data:`MODELLED_ENGINE`), :func:`origin` says so and no correction is applied.
"""

from __future__ import annotations

from typing import Any

MODELLED_ENGINE = "0.25.1"
"""The vLLM version whose scheduler and host terms latsim models (``engine_host.yaml``: vllm-0.25.1)."""


def is_imported(profile: dict[str, Any]) -> bool:
    src = profile.get("source")
    return isinstance(src, dict) and src.get("kind") == "imported"


def version_note(profile: dict[str, Any]) -> str:
    """Empty when the profile's vLLM version is the modelled one, else the drift, said."""
    ver = str(profile.get("vllm") or "unknown")
    if ver == MODELLED_ENGINE:
        return ""
    return f"; kernels timed under vLLM {ver}, engine modelled is {MODELLED_ENGINE} (priced as measured, uncorrected)"


def origin(profile: dict[str, Any]) -> str:
    """``imported from REPO@COMMIT (...)`` or ``measured here (...)``, with any version drift."""
    if is_imported(profile):
        src = profile["source"]
        head = (
            f"imported from {src.get('repository')}@{str(src.get('commit'))[:12]} ({src.get('engine')} "
            f"{src.get('engine_version')} on {profile.get('gpu_name')}, {src.get('license')})"
        )
    else:
        date = str(profile.get("date_utc"))[:10]
        head = f"measured here ({profile.get('gpu_name')}, {date}, {profile.get('grid')} grid)"
    return head + version_note(profile)


def status(profile: dict[str, Any] | None) -> str:
    """The ``cost model`` cell of ``latsim devices``."""
    if profile is None:
        return "roofline"
    if is_imported(profile):
        return f"imported ({profile['source'].get('tool')}, vLLM {profile.get('vllm')})"
    return f"measured here ({str(profile.get('date_utc'))[:10]}, {profile.get('grid')} grid)"


def label(kind: str, profile: dict[str, Any]) -> str:
    """The ``cost_model`` of a simulation summary: the kind, plus ``imported`` for an imported profile."""
    return (
        f"{kind} (imported: {profile['source'].get('tool')} vLLM {profile.get('vllm')})"
        if is_imported(profile)
        else kind
    )
