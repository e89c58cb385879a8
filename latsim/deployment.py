"""What is deployed: a model on a device type, its parallelism and the engine's knobs.

``EngineConfig`` fields left ``None`` take the serving engine's own defaults for the device
(:func:`resolve_engine`), so a deployment that sets nothing behaves like ``vllm serve`` with
no flags.  Validation happens here, once, with messages that name the bad value.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from latsim.catalog.devices import DeviceSpec
from latsim.catalog.models import ModelSpec
from latsim.catalog.quant_resolve import AUTO, resolve_kv_dtype, resolve_weight_dtype
from latsim.costmodel.host import check_host_speed
from latsim.registry import check_engine_name, engine_spec

ROUTERS = ("round-robin", "least-outstanding")
EXECUTORS = ("uni", "mp")
"""Where an engine runs the model: ``uni``, in its engine-core process (vLLM's default on one GPU);
``mp``, in one worker process per GPU (its default above one), which changes how a step run
without CUDA graphs overlaps the others (:mod:`latsim.engines.vllm.launch`)."""


@dataclass(frozen=True)
class EngineConfig:
    """Serving-engine knobs; ``None`` means "the engine's default for this device"."""

    engine: str = "vllm"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int = 16
    gpu_memory_utilization: float = 0.92  # vLLM 0.25.1 default (seen in its resolved config on H200)
    max_model_len: int | None = None
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    async_scheduling: bool = True
    num_gpu_blocks: int | None = None
    static_batch_size: int | None = None
    host_speed: float = 1.0
    """The serving host's CPU speed relative to the one latsim's engine CPU terms describe
    (0.5: half as fast; ``latsim host-speed`` estimates it on the machine it runs on)."""
    executor: str | None = None
    """:data:`EXECUTORS`; ``None``: the engine's default for the deployment's GPUs per engine."""
    language_model_only: bool = False
    """vLLM's ``--language-model-only``: a multimodal checkpoint's encoders (Gemma 3's vision
    tower, ``ModelSpec.encoder_params``) are not loaded, so their weights leave the KV cache's
    room; nothing changes for a text-only model."""

    def __post_init__(self) -> None:
        check_engine_name(self.engine)
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_model_len", "num_gpu_blocks",
                     "static_batch_size"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        check_host_speed(self.host_speed)
        if self.executor is not None and self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {', '.join(EXECUTORS)} (uni: the model in the engine's "
                             f"own process; mp: worker processes), got {self.executor!r}")
        if self.block_size not in (1, 2, 4, 8, 16, 32, 64, 128, 256):
            raise ValueError(f"block_size must be a power of two in 1..256, got {self.block_size}")


@dataclass(frozen=True)
class Deployment:
    """A model served on ``replicas`` engines of ``tp`` GPUs of type ``device`` each.

    ``weight_dtype`` / ``kv_dtype`` ``auto`` take the checkpoint's ``quantization_config``, else
    bf16; after construction both hold the resolved dtype and ``*_source`` says where it came
    from (``flag``, ``config`` or ``default``; :mod:`latsim.catalog.quant_resolve`).
    """

    model: ModelSpec
    device: DeviceSpec
    tp: int = 1
    replicas: int = 1
    router: str = "round-robin"
    weight_dtype: str = AUTO
    kv_dtype: str = AUTO
    engine: EngineConfig = field(default_factory=EngineConfig)
    weight_dtype_source: str | None = field(default=None, compare=False)
    kv_dtype_source: str | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.tp < 1 or self.replicas < 1:
            raise ValueError(f"tp and replicas must be >= 1, got tp={self.tp}, replicas={self.replicas}")
        if self.model.num_heads % self.tp != 0:
            divisors = [d for d in range(1, self.device.max_gpus_per_node + 1) if self.model.num_heads % d == 0]
            raise ValueError(
                f"tp={self.tp} does not divide the {self.model.num_heads} attention heads of "
                f"{self.model.name}; tp must divide them and be at most the {self.device.max_gpus_per_node} "
                f"GPUs per node of {self.device.name}: one of {', '.join(map(str, divisors))}"
            )
        if self.tp > self.device.max_gpus_per_node:
            raise ValueError(
                f"tp={self.tp} exceeds the {self.device.max_gpus_per_node} GPUs per node of {self.device.name}"
            )
        if self.router not in ROUTERS:
            raise ValueError(f"router must be one of {', '.join(ROUTERS)}, got {self.router!r}")
        weight, weight_source = resolve_weight_dtype(self.model, self.weight_dtype, self.weight_dtype_source)
        kv, kv_source = resolve_kv_dtype(self.model, self.kv_dtype, self.kv_dtype_source)
        for name, value in (("weight_dtype", weight), ("weight_dtype_source", weight_source), ("kv_dtype", kv),
                            ("kv_dtype_source", kv_source)):
            object.__setattr__(self, name, value)


def resolve_engine(deployment: Deployment) -> EngineConfig:
    """Fill the engine's defaulted knobs for this device and tensor parallelism (max_model_len is
    left to the memory plan)."""
    cfg = deployment.engine
    spec = engine_spec(cfg.engine)
    tokens, seqs = spec.server_defaults(deployment.device)
    tokens = cfg.max_num_batched_tokens or tokens
    return replace(
        cfg,
        max_num_batched_tokens=tokens,
        max_num_seqs=cfg.max_num_seqs or min(seqs, tokens),  # as vLLM's EngineArgs caps a defaulted one
        executor=cfg.executor or spec.default_executor(deployment.tp),
    )
