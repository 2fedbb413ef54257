"""JSON Schemas of every kind, generated from the pydantic models (one file per kind)."""

from __future__ import annotations

import json

from reconciler.policy.models import API_VERSION, KINDS


def schema_files() -> dict[str, str]:
    """File name -> JSON text, deterministic so a test can tell when schemas/ is stale."""
    out = {}
    for kind, cls in KINDS.items():
        schema = cls.model_json_schema(by_alias=True, mode="validation")
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://gpupool.io/schemas/{API_VERSION.split('/')[1]}/{kind.lower()}.json",
            **schema,
        }
        out[f"{kind.lower()}.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out
