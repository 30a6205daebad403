"""ONNX Runtime's own operator-schema registry, as the graph core needs it.

ORT resolves every node against its schema registry (ONNX, ai.onnx.ml and its contrib domains) during
``Graph::Resolve``: it picks the schema whose ``since_version`` is the greatest one not above the model's opset for
the node's domain, and fills every attribute that has a schema default and is missing on the node
(``VerifyNodeAndOpMatch``). We read the very same registry from the installed onnxruntime through
``onnxruntime.capi.onnxruntime_pybind11_state.get_all_operator_schema()``, so defaults can never drift from the
runtime we compare against.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import onnx

__all__ = ["ONNX_DOMAIN", "OpSchema", "lookup", "normalize_domain", "registry_domains"]

ONNX_DOMAIN = ""
_ONNX_ALIASES = {"", "ai.onnx"}


def normalize_domain(domain: str) -> str:
    """ORT treats ``ai.onnx`` as the default ONNX domain ``""``."""
    return ONNX_DOMAIN if domain in _ONNX_ALIASES else domain


@dataclass(frozen=True)
class OpSchema:
    """One schema version: where it starts, and its attributes with their defaults (None: no default)."""

    domain: str
    op_type: str
    since_version: int
    deprecated: bool
    attribute_defaults: tuple[tuple[str, onnx.AttributeProto | None], ...]

    def defaults(self) -> list[tuple[str, onnx.AttributeProto]]:
        """Attributes that have a default value, in the order ORT's Resolve adds them (its schema map's order)."""
        return [(name, proto) for name, proto in self.attribute_defaults if proto is not None]


def _parse_default(raw: bytes) -> onnx.AttributeProto | None:
    if not raw:
        return None
    proto = onnx.AttributeProto()
    proto.ParseFromString(raw)
    if proto.type == onnx.AttributeProto.UNDEFINED:
        return None
    return proto


@functools.cache
def _registry() -> dict[tuple[str, str], list[OpSchema]]:
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

    table: dict[tuple[str, str], list[OpSchema]] = {}
    for s in ort_c.get_all_operator_schema():
        # The pybind dict keeps the C++ schema map's iteration order, which is the order Resolve fills defaults in.
        attrs = tuple((name, _parse_default(attr._default_value)) for name, attr in s.attributes.items())
        schema = OpSchema(normalize_domain(s.domain), s.name, int(s.since_version), bool(s.deprecated), attrs)
        table.setdefault((schema.domain, schema.op_type), []).append(schema)
    for versions in table.values():
        versions.sort(key=lambda x: x.since_version)
    return table


@functools.cache
def registry_domains() -> dict[str, int]:
    """The highest opset version the registry knows per domain."""
    out: dict[str, int] = {}
    for (domain, _), versions in _registry().items():
        out[domain] = max(out.get(domain, 0), versions[-1].since_version)
    return out


def lookup(domain: str, op_type: str, opset: int | None) -> OpSchema | None:
    """The schema ORT resolves a node to, or None when the registry has none for that opset."""
    if opset is None:
        return None
    key = (domain, op_type, opset)
    found = _LOOKUPS.get(key, _MISSING)
    if found is _MISSING:
        found = _LOOKUPS[key] = _lookup(domain, op_type, opset)
    return found  # type: ignore[return-value]


_MISSING = object()
_LOOKUPS: dict[tuple[str, str, int], OpSchema | object | None] = {}


def _lookup(domain: str, op_type: str, opset: int) -> OpSchema | None:
    versions = _registry().get((normalize_domain(domain), op_type))
    if not versions:
        return None
    found = None
    for schema in versions:
        if schema.since_version <= opset:
            found = schema
        else:
            break
    if found is None or found.deprecated:
        return None
    return found
