"""``--json`` on passes, trace, diff and explain: every document validates against its schema in docs/json.md, says
what the text says, and the validator rejects a broken document (so the validation can fail)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from qdqopt.cli import example_model, main

DOC = Path(__file__).resolve().parents[1] / "docs" / "json.md"
MODEL = str(example_model())


def schemas() -> dict[str, dict[str, Any]]:
    """The schemas of docs/json.md: each fenced block tagged ```json <command>."""
    blocks = re.findall(r"```json (\w+)\n(.*?)\n```", DOC.read_text(), re.S)
    return {name: json.loads(body) for name, body in blocks}


_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "number": (int, float),
    "boolean": bool,
    "null": type(None),
}


def _is_type(value: object, name: str) -> bool:
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number" and isinstance(value, bool):
        return False
    return isinstance(value, _TYPES[name])


def validate(value: object, schema: dict[str, Any], where: str = "$") -> list[str]:
    """The errors of ``value`` against ``schema``: the part of JSON Schema docs/json.md uses (type, const, enum,
    properties, required, additionalProperties, items, minItems, minimum, oneOf)."""
    errors: list[str] = []
    if "oneOf" in schema:
        passing = [s for s in schema["oneOf"] if not validate(value, s, where)]
        if len(passing) != 1:
            errors.append(f"{where}: matches {len(passing)} of oneOf")
        return errors
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, n) for n in names):
            return [f"{where}: {type(value).__name__} is not {names}"]
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: {value!r} != {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in {schema['enum']}")
    if "minimum" in schema and isinstance(value, int | float) and value < schema["minimum"]:
        errors.append(f"{where}: {value} < {schema['minimum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        errors += [f"{where}: missing {k!r}" for k in schema.get("required", []) if k not in value]
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in props:
                errors += validate(item, props[key], f"{where}.{key}")
            elif extra is False:
                errors.append(f"{where}: unexpected {key!r}")
            elif isinstance(extra, dict):
                errors += validate(item, extra, f"{where}.{key}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                errors += validate(item, schema["items"], f"{where}[{i}]")
    return errors


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    status = main([*argv, "--json"])
    out = capsys.readouterr().out
    return status, json.loads(out)


def test_the_page_documents_the_four_commands() -> None:
    assert set(schemas()) == {"passes", "trace", "diff", "explain"}


def test_passes_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, doc = run_json(capsys, "passes", "--level", "all", "--all")
    assert status == 0
    assert validate(doc, schemas()["passes"]) == []
    main(["passes", "--level", "all", "--all"])
    text = capsys.readouterr().out
    # every row of the text is a row of the document, in the same order
    listed = [line.split()[1] for line in text.splitlines() if re.match(r"\s+\d+\s+\S", line)]
    assert listed == [row["name"] for row in doc["passes"]]
    assert any(not row["registered"] for row in doc["passes"])
    names = {r["name"] for row in doc["passes"] for r in row["rules"]}
    assert "ReluQuantRewrite" in names


def test_trace_json_with_ort_and_events(capsys: pytest.CaptureFixture[str]) -> None:
    status, doc = run_json(capsys, "trace", MODEL, "--level", "extended", "--ort", "--verbose")
    assert validate(doc, schemas()["trace"]) == []
    comparison = doc["ort_comparison"]
    assert status == (0 if comparison["identical"] else 1)
    assert comparison["lines"] == sum(1 for e in doc["entries"] if not e["plugin"])
    assert all(e["ort_check"] == "ok" for e in doc["entries"]) == comparison["identical"]
    fired = [e["name"] for e in doc["entries"] if e["modified"]]
    assert fired[0] == "EnsureUniqueDQForNodeUnit" and "QDQSelectorActionTransformer" in fired
    kinds = {e["kind"] for e in doc["events"]}
    assert {"modified", "changed", "no-match"} <= kinds  # ORT's lines and qdqopt's own
    assert [e["text"] for e in doc["events"] if e["kind"] == "modified"] == [
        f"{e['ort_line']} with status: OK" for e in doc["entries"]
    ]


def test_trace_json_without_ort(capsys: pytest.CaptureFixture[str]) -> None:
    status, doc = run_json(capsys, "trace", MODEL, "--level", "basic")
    assert status == 0
    assert validate(doc, schemas()["trace"]) == []
    assert doc["ort_comparison"] is None and doc["events"] is None
    wbq = next(e for e in doc["entries"] if e["name"] == "WeightBiasQuantization")
    assert wbq["modified"] and wbq["op_delta"]["DequantizeLinear"] > 0


def test_diff_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, doc = run_json(capsys, "diff", MODEL, "--level", "basic", "--config", "session.qdqisint8allowed=1")
    assert validate(doc, schemas()["diff"]) == []
    assert status == (0 if doc["equal"] else 1)
    (level,) = doc["levels"]
    assert level["level"] == "ORT_ENABLE_BASIC" and doc["config"] == {"session.qdqisint8allowed": "1"}
    assert level["tier"] == "P" and doc["equal"]  # BASIC is byte-identical on the bundled example


def test_explain_json_at_layout(capsys: pytest.CaptureFixture[str]) -> None:
    status, doc = run_json(capsys, "explain", MODEL, "--level", "layout")
    assert status == 0
    assert validate(doc, schemas()["explain"]) == []
    assert sum(doc["summary"].values()) == len(doc["units"])
    conv = next(u for u in doc["units"] if u["target"] == "node_conv2d")
    assert conv["outcome"] == "fused" and conv["result_op"] == "QLinearConv"
    assert doc["layout"] and {i["outcome"] for i in doc["layout"]} <= {"nhwc", "nchw"}


def test_the_validator_rejects_broken_documents(capsys: pytest.CaptureFixture[str]) -> None:
    _, doc = run_json(capsys, "explain", MODEL)
    schema = schemas()["explain"]
    assert validate(doc, schema) == []
    missing = copy.deepcopy(doc)
    del missing["units"][0]["reasons"]
    assert validate(missing, schema)
    wrong = copy.deepcopy(doc)
    wrong["units"][0]["outcome"] = "merged"
    assert validate(wrong, schema)
    extra = copy.deepcopy(doc)
    extra["undocumented"] = 1
    assert validate(extra, schema)
    typed = copy.deepcopy(doc)
    typed["int8_allowed"] = 0
    assert validate(typed, schema)


def test_explain_pass_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, doc = run_json(capsys, "explain", MODEL, "--pass", "EmbedLayerNormFusion")
    assert status == 0
    assert validate(doc, schemas()["explain"]) == []
    assert doc["pass"] == "EmbedLayerNormFusion" and doc["candidates"] == [] and doc["units"] == []
