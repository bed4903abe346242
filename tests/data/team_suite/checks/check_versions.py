"""Tests whose status depends on the packaging release installed: what `harness bisect --test`
and `harness watch` over a suite are tested with (check_sample.py's statuses never change)."""

import packaging
import pytest
from packaging.version import Version

INSTALLED = Version(packaging.__version__)


# packaging 24.0 made Metadata's optional fields default to None (23.2 gives ""; before 23.2
# there is no Metadata class). 23.1 is marked xfail: a probe there says nothing either way.
@pytest.mark.xfail(INSTALLED.release == (23, 1), reason="23.1 has packaging.metadata without Metadata")
def test_metadata_optional_fields_default_to_none():
    from packaging.metadata import Metadata

    parsed = Metadata.from_raw({"metadata_version": "2.1", "name": "x", "version": "1.0"})
    assert parsed.summary is None, f"summary is {parsed.summary!r}"


def test_version_parses():
    assert Version("1.0") < Version("1.1")


# The other side of that change: code that relied on "" breaks with 24.0 (one signature for both).
@pytest.mark.parametrize("name", ["summary", "author"])
def test_absent_field_reads_as_empty_text(name):
    from packaging.metadata import Metadata

    value = getattr(Metadata.from_raw({"metadata_version": "2.1", "name": "x", "version": "1.0"}), name)
    assert value == "", f"an absent field reads {value!r}"
