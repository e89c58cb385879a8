"""Which decoder linear layers a checkpoint leaves unquantized, by module name.

:func:`linear_modules` lists every quantizable linear layer of a :class:`ModelSpec` under its
Hugging Face module name (``model.layers.3.self_attn.q_proj``,
``model.layers.0.block_sparse_moe.experts.5.w1``, Phi-3's fused ``qkv_proj`` / ``gate_up_proj``)
with its parameter count.  :func:`unquantized_linear_params` sums the ones a
:class:`~latsim.catalog.quant.QuantSpec` keeps 16-bit: those its ``ignore`` list names and,
when it has ``targets``, those no target names.  Names are matched by vLLM's rule for the
method (``QuantSpec.match``):

* ``exact-or-prefix`` (fp8, ModelOpt): the name itself, a dotted prefix of it, or a
  shell-style pattern with ``*``;
* ``substring`` (AWQ, GPTQ): any substring of the name;
* ``component`` (bitsandbytes): one dot-separated component, or a dotted prefix;
* ``compressed-tensors``: the exact name, or ``re:<regex>`` matched from the start.

Embeddings, the LM head, norms, biases and MoE routers are not listed: they are 16-bit in every
scheme (:mod:`latsim.catalog.sizing`).  Which layers of a Qwen-MoE model are sparse follows the
config's ``mlp_only_layers`` / ``decoder_sparse_step``, as in :mod:`latsim.catalog.hf_config`.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator

from latsim.catalog.models import ModelSpec
from latsim.catalog.quant import QuantSpec


def linear_modules(model: ModelSpec) -> Iterator[tuple[str, int]]:
    """``(module name, parameters)`` of every quantizable linear layer, layer by layer."""
    moe = _moe_layers(model)
    for i in range(model.num_layers):
        pre = f"model.layers.{i}."
        yield from _attention(model, pre)
        if i in moe:
            yield from _experts(model, pre)
        else:
            yield from _mlp(model, pre + "mlp.", model.intermediate_size, ("gate_proj", "up_proj", "down_proj"))


def _attention(model: ModelSpec, pre: str) -> Iterator[tuple[str, int]]:
    h, q, kv = model.hidden_size, model.q_size, model.kv_size
    if model.family == "phi3":
        yield pre + "self_attn.qkv_proj", h * (q + 2 * kv)
    else:
        yield from ((pre + "self_attn.q_proj", h * q), (pre + "self_attn.k_proj", h * kv),
                    (pre + "self_attn.v_proj", h * kv))
    yield pre + "self_attn.o_proj", q * h


def _mlp(model: ModelSpec, pre: str, width: int, names: tuple[str, str, str]) -> Iterator[tuple[str, int]]:
    h = model.hidden_size
    if model.family == "phi3":
        yield from ((pre + "gate_up_proj", 2 * h * width), (pre + "down_proj", width * h))
        return
    if model.gated_mlp:
        yield pre + names[0], h * width
    yield from ((pre + names[1], h * width), (pre + names[2], width * h))


def _experts(model: ModelSpec, pre: str) -> Iterator[tuple[str, int]]:
    width = model.moe_intermediate_size
    if model.family == "mixtral":
        for e in range(model.num_experts):
            yield from _mlp(model, f"{pre}block_sparse_moe.experts.{e}.", width, ("w1", "w3", "w2"))
        return
    for e in range(model.num_experts):
        yield from _mlp(model, f"{pre}mlp.experts.{e}.", width, ("gate_proj", "up_proj", "down_proj"))
    if model.shared_expert_intermediate_size:
        yield from _mlp(model, pre + "mlp.shared_expert.", model.shared_expert_intermediate_size,
                        ("gate_proj", "up_proj", "down_proj"))


def _moe_layers(model: ModelSpec) -> set[int]:
    if not model.is_moe:
        return set()
    cfg = model.hf_config_dict()
    step = cfg.get("decoder_sparse_step") or 1
    dense = set(cfg.get("mlp_only_layers") or [])
    layers = {i for i in range(model.num_layers) if i not in dense and (i + 1) % step == 0}
    if len(layers) != model.num_moe_layers:  # a hand-built spec: the last layers are the sparse ones
        layers = set(range(model.num_layers - model.num_moe_layers, model.num_layers))
    return layers


def matcher(rule: str, patterns: tuple[str, ...]) -> Callable[[str], bool]:
    """A predicate telling whether a module name is named by ``patterns`` under ``rule``."""
    if not patterns:
        return lambda name: False
    if rule == "substring":
        return lambda name: any(p in name for p in patterns)
    if rule == "component":
        return lambda name: any(p in name.split(".") or name == p or name.startswith(p + ".") for p in patterns)
    if rule == "compressed-tensors":
        regexes = [re.compile(p[3:]) for p in patterns if p.startswith("re:")]
        exact = {p for p in patterns if not p.startswith("re:")}
        return lambda name: name in exact or any(r.match(name) for r in regexes)
    if rule == "exact-or-prefix":
        globs = [p for p in patterns if "*" in p]
        plain = [p for p in patterns if "*" not in p]
        return lambda name: (any(name == p or name.startswith(p + ".") for p in plain)
                             or any(fnmatch.fnmatchcase(name, g) for g in globs))
    raise ValueError(f"unknown module-name match rule {rule!r}")


def unquantized_linear_params(model: ModelSpec, spec: QuantSpec) -> int:
    """Decoder linear parameters ``spec`` leaves 16-bit (see the module docstring)."""
    ignored = matcher(spec.match, spec.ignore)
    targeted = matcher(spec.match, spec.targets)
    return sum(n for name, n in linear_modules(model)
               if ignored(name) or (spec.targets and not targeted(name)))
