"""`redact.local_paths`' patterns match from a word's start only (for speed): the same text out as
the patterns tried from every character, on paths in the places reports hold them."""

from __future__ import annotations

import re

import pytest

from harness.analysis import redact

#: The patterns as they were before they were anchored at a word's start (the reference).
_EVERYWHERE = {
    "_SITE": r"""(?:[A-Za-z]:)?[^\s"'(]*[/\\](?:site|dist)-packages[/\\]""",
    "_ENV": r"""(?:[A-Za-z]:)?[^\s"'(]*[/\\][\w.+-]+-[0-9a-f]{12}(?=[/\\\s"')]|$)""",
    "_STDLIB": r"""(?:[A-Za-z]:)?[^\s"'(]*[/\\]lib[/\\]python3\.\d+[/\\](?!site-packages|dist-packages)""",
    "_CHECKOUT": r"""(?:[A-Za-z]:)?[^\s"'(]*[/\\](harness|scenarios)[/\\]""",
}

TEXTS = [
    'File "/tmp/envs/c-1b61aaaaaaaa/lib/python3.11/site-packages/peft/x.py", line 3, in f',
    "/a/site-packages/b/site-packages/c and (C:\\py\\Lib\\site-packages\\x.py) 'q/dist-packages/z'",
    "/tmp/envs/torch2.13.0-tf5.8.0-c4fef2c25fb6/bin/python and x-0123456789ab/lib/y-0123456789ab",
    "/usr/lib/python3.11/runpy.py /usr/lib/python3.12/site-packages/a.py lib/python3.11/x/lib/python3.11/y",
    "/home/me/compat/harness/running/incell/suite.py, file:///srv/x/scenarios/gemma.py|`/w/harness/a`",
    "| t.py::test_a[/x/site-packages/] | **fails** `KeyError: 'lm_head'` |" * 3,
    "",
]


@pytest.mark.parametrize("name", sorted(_EVERYWHERE))
@pytest.mark.parametrize("text", TEXTS)
def test_anchored_patterns_match_what_they_matched_from_every_character(name: str, text: str) -> None:
    anchored, everywhere = getattr(redact, name), re.compile(_EVERYWHERE[name])
    assert anchored.pattern.endswith(everywhere.pattern)  # the same pattern, anchored
    assert [m.span() for m in anchored.finditer(text)] == [m.span() for m in everywhere.finditer(text)]


@pytest.mark.parametrize("name", sorted(_EVERYWHERE))
def test_each_pattern_matches_several_of_the_texts(name: str) -> None:
    assert sum(len(getattr(redact, name).findall(text)) for text in TEXTS) >= 2  # the equality above is not over no match
