"""mig-parted's config file, `api/spec/v1`, checked the way mig-parted parses it.

Read in NVIDIA/mig-parted (commit bd7160f4):
* api/spec/v1/spec.go, `Spec.UnmarshalJSON`: `version` is required (as soon as anything is
  there) and must be "v1"; no field but `version` and `mig-configs`; `mig-configs` needs at
  least one entry, and every entry at least one item. `MigConfigSpec.UnmarshalJSON`: `devices`
  and `mig-enabled` are required; no field but `device-filter`, `devices`, `mig-enabled`,
  `mig-devices`; `devices` is the string "all" or a list of integers; `device-filter` a string
  or a list of strings; `mig-devices` is required when `mig-enabled` is true and must be empty
  when it is false.
* pkg/types/mig_config.go `AssertValidFormat`: every profile name parses, no count is negative,
  and not all counts are 0; go-nvlib pkg/nvlib/device/mig_profile.go `parseMigProfile` (vendored
  in mig-parted): `[<c>c.]<g>g.<gb>gb`, then `+attr[,attr]` or `-attr[,attr]`.
* cmd/nvidia-mig-parted/assert/assert.go: `ParseConfigFile` unmarshals the whole file before a
  config is selected, so one malformed entry fails every config in it; `GetSelectedMigConfig`
  takes the only config when none is named, and fails with "selected mig-config not present"
  for a name the file does not have.
* The YAML goes through sigs.k8s.io/yaml (YAML -> JSON -> Go types): a JSON bool is not a
  number, a number with a fraction is not an int.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

VERSION = "v1"
_INT = re.compile(r"[+-]?[0-9]+")


class SpecError(ValueError):
    """mig-parted refuses the file or the selected config."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _field(s: str, suffix: str) -> int:
    if s.strip() != s:
        raise SpecError(f"leading or trailing spaces on '%d{suffix}'")
    if not s.endswith(suffix) or not _INT.fullmatch(s[: -len(suffix)]):
        raise SpecError(f"malformed '%d{suffix}' in {s!r}")
    return int(s[: -len(suffix)])


def check_profile(profile: str) -> None:
    """go-nvlib `parseMigProfile`, the format only (which profiles a card has is not asked)."""
    if not isinstance(profile, str) or not profile:
        raise SpecError("profile is the empty string")
    plus, minus = profile.split("+", 1), profile.split("-", 1)
    if len(plus) == 2 and len(minus) == 2:
        raise SpecError(f"profile {profile!r} contains both '+/-' attributes")
    parts = plus if len(plus) == 2 else minus
    fields = parts[0].split(".", 2)
    if len(fields) == 3:
        _field(fields[0], "c"), _field(fields[1], "g"), _field(fields[2], "gb")
    elif len(fields) == 2:
        _field(fields[0], "g"), _field(fields[1], "gb")
    else:
        raise SpecError(f"cannot parse fields of {profile!r}: expected 2 or 3")
    if len(parts) == 1:
        return
    seen: set[str] = set()
    for a in parts[1].split(","):
        ok = (
            a
            and a not in seen
            and a.strip() == a
            and not a[0].isdigit()
            and a[0] != "."
            and a[-1] != "."
            and all(c.isascii() and (c.isalnum() or c == ".") for c in a)
        )
        if not ok:
            raise SpecError(f"cannot parse attributes of {profile!r}")
        seen.add(a)


def _item(name: str, item: Any) -> dict:
    if not isinstance(item, dict):
        raise SpecError(f"{name}: an item is not a mapping")
    for required in ("devices", "mig-enabled"):
        if required not in item:
            raise SpecError(f"{name}: missing required field: {required}")
    out: dict[str, Any] = {"mig-devices": None}
    for k, v in item.items():
        if k == "device-filter":
            strings = isinstance(v, list) and all(isinstance(x, str) for x in v)
            if not (isinstance(v, str) or strings):
                raise SpecError(f"{name}: device-filter is neither a string nor a list of them")
            out[k] = v
        elif k == "devices":
            if isinstance(v, str):
                if v != "all":
                    raise SpecError(f"{name}: invalid string input for 'devices': {v}")
            elif not (isinstance(v, list) and all(_is_int(x) for x in v)):
                raise SpecError(f"{name}: devices is neither 'all' nor a list of integers")
            out[k] = v
        elif k == "mig-enabled":
            if not isinstance(v, bool):
                raise SpecError(f"{name}: mig-enabled is not a bool")
            out[k] = v
        elif k == "mig-devices":
            if v is None:
                continue
            if not isinstance(v, dict) or not all(_is_int(c) for c in v.values()):
                raise SpecError(f"{name}: mig-devices is not a map of profile to count")
            for profile, count in v.items():
                check_profile(profile)
                if count < 0:
                    raise SpecError(f"{name}: invalid count for {profile!r}: {count}")
            if v and not any(c > 0 for c in v.values()):
                raise SpecError(f"{name}: all counts for all MigProfiles are 0")
            out[k] = dict(v)
        else:
            raise SpecError(f"{name}: unexpected field: {k}")
    if out["mig-enabled"] and out["mig-devices"] is None:
        raise SpecError(f"{name}: missing required field 'mig-devices' when 'mig-enabled' is true")
    if not out["mig-enabled"] and out["mig-devices"]:
        raise SpecError(f"{name}: MIG devices included when 'mig-enabled' is false")
    out["mig-devices"] = out["mig-devices"] or {}
    return out


def parse_spec(text: str) -> dict[str, list[dict]]:
    """Every config of a mig-parted config file (name -> items), or SpecError."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SpecError(f"unmarshal error: {exc}") from None
    doc = {} if doc is None else doc
    if not isinstance(doc, dict):
        raise SpecError("unmarshal error: not a mapping")
    if "version" not in doc and doc:
        raise SpecError("unable to parse with missing 'version' field")
    if doc.get("version", "") != VERSION:
        raise SpecError(f"unknown version: {doc.get('version', '')}")
    configs: dict[str, list[dict]] = {}
    for k, v in doc.items():
        if k == "version":
            continue
        if k != "mig-configs":
            raise SpecError(f"unexpected field: {k}")
        if v is not None and not isinstance(v, dict):
            raise SpecError("mig-configs is not a mapping")
        if not v:
            raise SpecError("at least one entry in 'mig-configs' is required")
        for name, items in v.items():
            if items is not None and not isinstance(items, list):
                raise SpecError(f"{name}: not a list")
            if not items:
                raise SpecError(f"at least one entry in '{name}' is required")
            configs[str(name)] = [_item(str(name), i) for i in items]
    return configs


def select(text: str, name: str) -> list[dict]:
    """`nvidia-mig-parted assert --valid-config -f <file> -c <name>`: the selected config's
    items, or SpecError."""
    configs = parse_spec(text)
    if not name and len(configs) == 1:
        return next(iter(configs.values()))
    if not name and len(configs) > 1:
        raise SpecError("missing required flag 'selected-config' when more than one config")
    if name not in configs:
        raise SpecError(f"selected mig-config not present: {name}")
    return configs[name]
