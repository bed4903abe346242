"""A failure's signature made short for one line, two ways. Pure.

In a report's table the message is cut and ` @ location` kept whole, as it names the library
(`short_signature`); where the blamed library is named beside it (the summary, the published
page) the location is left out (`without_location`). Not in `analysis/signature.py`: a repro
carries that file verbatim.
"""

from __future__ import annotations


def short_signature(signature: str, limit: int = 160) -> str:
    """A long signature cut in its message, keeping ` @ location` whole: the location names the library.

    >>> short_signature("KeyError: " + "k" * 80 + " @ peft/tuners/lora.py:merge", 60)
    'KeyError: kkkkkkkkkkkkkkkkkkkkkkkkkkkkkk… @ peft/tuners/lora.py:merge'
    """
    if len(signature) <= limit:
        return signature
    message, at, location = signature.rpartition(" @ ") if " @ " in signature else (signature, "", "")
    keep = max(limit - len(at) - len(location) - 1, 40)
    return message[:keep].rstrip() + "…" + at + location


def without_location(signature: str, limit: int = 120) -> str:
    """The signature's exception and message, its ` @ location` left out (the blamed library is
    named beside it), cut to `limit` characters.

    >>> without_location("KeyError: <key> @ peft/tuners/lora.py:merge"), without_location("x" * 10, 5)
    ('KeyError: <key>', 'xxxx…')
    """
    text = signature.split(" @ ")[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"
