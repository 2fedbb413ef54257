"""schemas/ is generated from the models (`gpupool schema --out schemas/`); fail if it is stale."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML

from reconciler.policy.schema import schema_files

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"


def test_schemas_folder_is_up_to_date():
    expected = schema_files()
    present = {p.name for p in SCHEMAS.glob("*.json")}
    stale = [
        n
        for n, text in expected.items()
        if not (SCHEMAS / n).is_file() or (SCHEMAS / n).read_text() != text
    ]
    extra = present - set(expected)
    assert not stale and not extra, (
        f"schemas/ is stale (changed: {stale}, not generated: {sorted(extra)}); "
        "run `gpupool schema --out schemas/` and commit the result"
    )


def test_schema_files_are_deterministic():
    assert schema_files() == schema_files()


def _example_documents():
    yaml = YAML(typ="safe")
    for f in sorted([*ROOT.glob("pools/*.yaml"), *ROOT.glob("policies/*.yaml")]):
        for doc in yaml.load_all(f.read_text()):
            if doc:
                yield pytest.param(doc, id=f"{f.name}:{doc['kind']}/{doc['metadata']['name']}")


@pytest.mark.parametrize("doc", list(_example_documents()))
def test_examples_satisfy_the_json_schema(doc):
    """The JSON Schemas describe what the loader accepts (editors and CI use them)."""
    schema = json.loads(schema_files()[f"{doc['kind'].lower()}.json"])
    jsonschema.validate(doc, schema)
