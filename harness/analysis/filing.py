"""Where to file a failure and what to call it: the blamed library, its tracker, the other libraries
in the trace to cross-link, and the issue's title. Pure.

The library is the one the innermost frame under test names (`rows.blamed_library`, from the
signature); where the failing frame is the scenario's or the test's own code, the library whose
releases introduced or fixed it, where one explains it (`blamed`). torch raises on behalf of its
callers (`signature.SUBSTRATE`): never a cross-link of its own.

>>> repository("accelerate"), suggested_title("KeyError: 'x'", "peft", "0.19.0")
('huggingface/accelerate', "KeyError: 'x' (peft 0.19.0)")
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from packaging.utils import canonicalize_name

from harness.analysis.attribution import Transition
from harness.analysis.redact import local_paths
from harness.analysis.rows import is_test
from harness.analysis.shorttrace import frames_of
from harness.analysis.signature import DEFAULT_LIBRARIES, SUBSTRATE, library_of
from harness.analysis.versions import version_key

#: Library (canonical name) -> the GitHub repository that takes its issues.
REPOSITORIES = {
    "transformers": "huggingface/transformers",
    "accelerate": "huggingface/accelerate",
    "peft": "huggingface/peft",
    "bitsandbytes": "bitsandbytes-foundation/bitsandbytes",
    "torch": "pytorch/pytorch",
    "tokenizers": "huggingface/tokenizers",
    "safetensors": "huggingface/safetensors",
    "huggingface-hub": "huggingface/huggingface_hub",
    "diffusers": "huggingface/diffusers",
    "trl": "huggingface/trl",
    "optimum": "huggingface/optimum",
}


def repository(library: str) -> str:
    """`accelerate` -> `huggingface/accelerate`; "" for a library we know no tracker of."""
    return REPOSITORIES.get(str(canonicalize_name(library)), "") if library else ""


def libraries_in_trace(traceback: str, libraries: Iterable[str] = DEFAULT_LIBRARIES) -> list[tuple[str, str]]:
    """(library, innermost `path.py:function` of it) for every library under test in the trace, outermost first."""
    innermost: dict[str, str] = {}
    for filename, function in frames_of(traceback):
        lib, relative = library_of(filename, tuple(libraries))
        if lib:
            innermost.pop(lib, None)  # re-insert: the order is that of the innermost frames
            innermost[lib] = f"{relative}:{function}" if function else relative
    return list(innermost.items())


def blamed(rows: Sequence[Mapping[str, Any]], signature: str, transitions: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(library, why): the frame the signature names; else the library whose releases the answers move."""
    counted = Counter(str(r.get("blamed_library") or "") for r in rows if r.get("blamed_library"))
    if counted:
        library = counted.most_common(1)[0][0]
        location = signature.split(" @ ", 1)[1] if " @ " in signature else ""
        return library, f"the innermost frame under test is `{location}`" if location else "the innermost frame under test is in it"
    if " @ " in signature:
        location = signature.rsplit(" @ ", 1)[1]
        return location.split("/", 1)[0], f"the innermost frame under test is `{location}`"
    return _by_releases(transitions, str(rows[0].get("scenario") or "") if rows else "")


def file_at(rows: Sequence[Mapping[str, Any]], signature: str, transitions: Sequence[Mapping[str, Any]]) -> str:
    """The library a failure is filed at, as its report's "File at" names it; "" where undetermined."""
    return blamed(rows, signature, [t for t in transitions if t.get("signature", signature) == signature])[0]


#: The answers a "File at" line quotes at most.
_QUOTED = 3


def _by_releases(transitions: Sequence[Mapping[str, Any]], scenario: str) -> tuple[str, str]:
    """(library, why) where the failing frame is the scenario's or the test's own code: the library whose
    releases introduced or fixed it, where one explains it. That is the only axis the answers move; else
    the only one with an exact introduction (its releases brought it, whatever others did); else, with
    no introduction, the only one with an exact fix. ("", "") where none does."""
    moves = [Transition.from_dict(t) for t in transitions if t.get("kind") in ("introduced", "fixed") and t.get("axis")]
    axes = {t.axis for t in moves}
    introduced = {t.axis for t in moves if t.kind == "introduced" and t.exact}
    fixed = {t.axis for t in moves if t.kind == "fixed" and t.exact}
    chosen = axes if len(axes) == 1 else introduced if len(introduced) == 1 else fixed if not introduced and len(fixed) == 1 else set()
    if not chosen:
        return "", ""
    axis = next(iter(chosen))
    mine = [t for t in moves if t.axis == axis]
    answers = list(dict.fromkeys(t.headline() for t in sorted(mine, key=lambda t: (not t.exact, t.kind != "introduced"))))
    own = "the test's own code" if is_test(scenario) else "the scenario's own check"
    only = "only " if len(axes) == 1 else ""
    why = f"the failing frame is {own}, and {only}{axis}'s releases change it: {'; '.join(answers[:_QUOTED])}"
    fixes = sorted((t.after for t in mine if t.kind == "fixed" and t.exact), key=version_key)
    if fixes and any(t.kind == "introduced" for t in mine):  # (a fix alone has its note above the summary)
        why += f". It is fixed in {axis} {fixes[0]}: file only if it fails with the newest release, or say there that it is fixed"
    return axis, why


def file_at_lines(library: str, why: str, others: Sequence[tuple[str, str]]) -> list[str]:
    repo = repository(library)
    if repo:
        lines = [f"**File at:** {repo} — {why} ([new issue](https://github.com/{repo}/issues/new))."]
    elif library:
        lines = [f"**File at:** the `{library}` project — {why}."]
    else:
        lines = ["**File at:** undetermined — no frame inside a library under test, and no single library's releases explain it."]
    links = [f"{repository(lib) or lib} (`{where}`)" for lib, where in others if lib != library and lib not in SUBSTRATE]
    if links:
        lines.append(f"**Cross-link:** {', '.join(links)} — also in the traceback.")
    return lines


def exception_line(row: Mapping[str, Any]) -> str:
    """The exception as raised, first line: `TypeError: Params4bit.__new__() got …`."""
    message = str(row.get("message") or "").strip()
    first = message.splitlines()[0].strip() if message else ""
    kind = str(row.get("exception_type") or "")
    if kind and first and not first.startswith(kind):
        first = f"{kind}: {first}"
    first = local_paths(first or str(row.get("signature") or row["status"]))  # cut after: a path cut in two is not found again
    return first if len(first) <= 140 else first[:139] + "…"


#: A suggested title fits in a line of an issue tracker's list.
TITLE_LIMIT = 100


def suggested_title(headline: str, library: str, version: str = "", limit: int = TITLE_LIMIT) -> str:
    """The exception and its library in at most `limit` characters: `… (accelerate 1.13.0)`, the version
    left out where it does not fit, the message cut where the library alone does not; a file the message
    ends on (`(site-packages/peft/x.py)`) left out first.

    >>> suggested_title("TypeError: Params4bit.__new__() got an unexpected keyword argument '_is_hf_initialized'", "accelerate", "1.13.0")
    "TypeError: Params4bit.__new__() got an unexpected keyword argument '_is_hf_initialized' (accelerate)"
    >>> len(suggested_title("ScenarioFailed: keys " + str([f"model.layers.{i}.mlp" for i in range(20)]), "peft", "0.19.0"))
    100
    """
    headline = re.sub(r" \((?:[\w.<>~-]+/)+[\w.-]+\.py\)$", "", headline)  # the file of an ImportError: no title needs it
    tails = [f" ({library} {version})", f" ({library})"] if library and version else [f" ({library})"] if library else [""]
    for tail in tails:
        if len(headline) + len(tail) <= limit:
            return headline + tail
    return headline[: limit - len(tails[-1]) - 1].rstrip() + "…" + tails[-1]
