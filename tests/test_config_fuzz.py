"""Bad input, property-based: params.yaml sections with random and malformed values. ``load_section``
returns its dataclass or raises ConfigError naming the file and the section; never another
exception from deep inside (a TypeError from a dataclass, a KeyError, a YAML traceback)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from factrl import config
from factrl.config import ConfigError, load_section
from factrl.sections import all_sections
from tests.fuzz import json_values, tried

SECTIONS = all_sections()
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def field_names(cls) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []


@st.composite
def section(draw):
    """A section name and a value for it: a mapping of its own keys (and a stray one) to any value,
    or not a mapping at all."""
    name = draw(st.sampled_from(sorted(SECTIONS)))
    keys = field_names(SECTIONS[name]) + ["not_a_key"]
    value = draw(st.one_of(st.dictionaries(st.sampled_from(keys), json_values, max_size=4), json_values))
    return name, value


def dump(data) -> str:
    import io

    out = io.StringIO()
    YAML(typ="safe").dump(data, out)
    return out.getvalue()


@FUZZ
@given(case=section())
def test_load_section_raises_only_config_errors(case):
    name, value = case
    tried(f"config.load_section.{name}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "params.yaml"
        path.write_text(dump({name: value}))
        try:
            loaded = load_section(name, path)
        except ConfigError as err:
            assert str(path) in str(err) and name in str(err), err
            return
        assert isinstance(loaded, SECTIONS[name])


@FUZZ
@given(text=st.text(max_size=200))
def test_malformed_yaml_is_a_config_error(text):
    tried("config.read_params")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "params.yaml"
        path.write_text(text)
        try:
            config.read_params(path)
        except ConfigError as err:
            assert str(path) in str(err)
