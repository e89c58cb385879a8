"""Every prediction setting, declared once.

:class:`Settings` lists the settings with their help and where they live in a deployment file
(``section``).  From this one list come ``predict``'s command-line options
(:func:`latsim.cli.options.with_settings`), the deployment-file schema
(:data:`DeploymentFile`), and, with the field defaults of
:class:`~latsim.deployment.Deployment` and :class:`~latsim.deployment.EngineConfig`, the
defaults (:data:`latsim.scenario.DEFAULTS`).  A new knob is one field here plus its use.

A deployment file groups the same settings::

    model: llama-3.1-70b
    device: h100
    tp: 4
    engine: {name: vllm, max_num_seqs: 256, enable_prefix_caching: false}
    workload: {qps: 8, input_dist: "lognormal:median=600,sigma=0.8", output_len: 200}

Flags given on the command line win over the file.  Errors name the file, the field and what
is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

SECTIONS = ("top", "engine", "workload")


def setting(help: str, section: str = "top", *, flag: str | None = None, file_key: str | None = None,
            default: Any = None) -> Any:
    """A :class:`Settings` field: ``None`` (not given) unless set, with its metadata.

    ``flag``: the command-line option when it is not ``--`` + the name with dashes;
    ``file_key``: the key in the deployment file's section when it is not the name;
    ``default``: the default of a setting that is not a Deployment/EngineConfig field.
    """
    assert section in SECTIONS
    return field(default=None, metadata={"help": help, "section": section, "flag": flag, "file_key": file_key,
                                         "default": default})


@dataclass(frozen=True)
class Settings:
    """Every prediction setting; ``None`` means "not given" (a file or the default fills it)."""

    model: str | None = setting("Catalog name (see `latsim models`) or a Hugging Face config.json path",
                                default="llama-3.1-8b")
    device: str | None = setting("GPU name (see `latsim devices`)", default="h100")
    tp: int | None = setting("Tensor-parallel GPUs per replica")
    replicas: int | None = setting("Engine replicas behind the router")
    router: str | None = setting("round-robin | least-outstanding")
    weight_dtype: str | None = setting("auto (the checkpoint's quantization_config, else bf16) | bf16 | fp16 | fp8 | "
                                        "int8 | w8a16 | int4")
    kv_dtype: str | None = setting("KV-cache dtype: auto (the checkpoint's, else bf16) | bf16 | fp16 | fp8",
                                    flag="--kv-cache-dtype")
    engine: str | None = setting("vllm | static | vllm-exact (vLLM's own scheduler, ~0.5 ms/step)", "engine",
                                 file_key="name")
    max_num_seqs: int | None = setting("Most requests in a step (default: vLLM's for the GPU)", "engine")
    max_num_batched_tokens: int | None = setting("Token budget of a step (default: vLLM's for the GPU)", "engine")
    block_size: int | None = setting("KV-cache block size in tokens", "engine")
    gpu_memory_utilization: float | None = setting("Share of GPU memory the engine may use", "engine")
    max_model_len: int | None = setting("Longest request, prompt + output (default: the model's)", "engine")
    enable_chunked_prefill: bool | None = setting("Chunked prefill", "engine", flag="--chunked-prefill")
    enable_prefix_caching: bool | None = setting("Prefix caching", "engine", flag="--prefix-caching")
    async_scheduling: bool | None = setting("vLLM's asynchronous scheduling (off: its synchronous loop)", "engine")
    num_gpu_blocks: int | None = setting("Override the KV blocks the memory plan gives", "engine")
    executor: str | None = setting("Where the engine runs the model: uni (its own process; vLLM's default on one GPU) "
                                   "| mp (worker processes; its default at TP > 1)", "engine")
    language_model_only: bool | None = setting("vLLM's --language-model-only: a multimodal checkpoint's vision "
                                               "encoder is not loaded (its weights leave room for KV cache)",
                                               "engine")
    host_speed: float | None = setting("Serving host's CPU speed vs the one latsim's engine CPU terms describe "
                                       "(0.5: half as fast; see `latsim host-speed`)", "engine")
    qps: float | None = setting("Mean request rate (req/s)", "workload", default=8.0)
    trace: str | None = setting("Trace file: latsim JSONL/CSV or Azure CSV (instead of --qps and lengths)",
                                "workload")
    arrival: str | None = setting("poisson | gamma:cv=2 | constant | burst", "workload", default="poisson")
    input_len: int | None = setting("Fixed prompt length", "workload")
    input_dist: str | None = setting("Prompt length spec, e.g. lognormal:median=600,sigma=0.8", "workload",
                                     default="lognormal:median=600,sigma=0.8,min=16,max=4096")
    output_len: int | None = setting("Fixed output length", "workload")
    output_dist: str | None = setting("Output length spec", "workload",
                                      default="lognormal:median=150,sigma=0.6,min=8,max=1024")
    num_requests: int | None = setting("Requests to simulate (default 1000)", "workload")
    seed: int | None = setting("Random seed", "workload", default=0)


def setting_flag(name: str) -> str:
    """The command-line option of setting ``name`` (e.g. ``--kv-cache-dtype`` for ``kv_dtype``)."""
    meta = next(f.metadata for f in fields(Settings) if f.name == name)
    return str(meta["flag"] or "--" + name.replace("_", "-"))


def keys_of(section: str) -> tuple[str, ...]:
    """The :class:`Settings` names of deployment-file ``section`` (``top``, ``engine``, ``workload``)."""
    return tuple(f.name for f in fields(Settings) if f.metadata["section"] == section)


def file_key(name: str) -> str:
    """The deployment-file key of setting ``name``."""
    meta = next(f.metadata for f in fields(Settings) if f.name == name)
    return str(meta["file_key"] or name)


ENGINE_KEYS = keys_of("engine")
WORKLOAD_KEYS = keys_of("workload")
"""Settings grouped under ``engine:`` and ``workload:`` in a file; the others sit at the top."""

_STRICT = ConfigDict(extra="forbid", populate_by_name=True)


def _section(name: str, keys: tuple[str, ...], **extra: Any) -> type[BaseModel]:
    """A strict pydantic model with ``keys`` of :class:`Settings` (same types, default None)."""
    hints = get_type_hints(Settings)
    spec: dict[str, Any] = {k: (hints[k], Field(None, alias=file_key(k))) for k in keys}
    return create_model(name, __config__=_STRICT, **spec, **extra)


EngineSection = _section("EngineSection", ENGINE_KEYS)
WorkloadSection = _section("WorkloadSection", WORKLOAD_KEYS)
DeploymentFile = _section("DeploymentFile", keys_of("top"), engine=(EngineSection, EngineSection()),
                          workload=(WorkloadSection, WorkloadSection()))


def file_settings(file: BaseModel) -> dict[str, Any]:
    """The settings a validated :data:`DeploymentFile` gives, by :class:`Settings` name (unset: None)."""
    dumped = file.model_dump()
    return {**{k: v for k, v in dumped.items() if k not in ("engine", "workload")}, **dumped["engine"],
            **dumped["workload"]}


def read_yaml_file(path: str | Path, kind: str) -> Any:
    """The YAML document of a user's ``kind`` file (``deployment``, ``grid``); every way reading
    it fails is a one-line ValueError naming the file."""
    p = Path(path)
    try:
        return yaml.safe_load(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{kind} file {p} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"{kind} file {p} is a directory, not a YAML file") from None
    except UnicodeDecodeError:
        raise ValueError(f"{kind} file {p} is not text (UTF-8 YAML expected)") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{kind} file {p} is not valid YAML: {str(exc).splitlines()[0]}") from None


def load_deployment_file(path: str | Path) -> Any:
    """Parse and validate a deployment file; ValueError names the file and the bad field."""
    p = Path(path)
    raw = read_yaml_file(p, "deployment")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ValueError(f"deployment file {p} must hold a mapping of settings, got {type(raw).__name__}")
    try:
        return DeploymentFile.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise ValueError(f"deployment file {p}: {where}: {first['msg']}") from None
