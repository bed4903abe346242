"""Secrets are masked in everything stored (the module is harness/analysis/redact.py, formerly secrets.py)."""

from __future__ import annotations

import pytest

try:
    from harness.analysis import redact as secrets
except ImportError:  # the module's older name
    from harness import secrets  # type: ignore[no-redef]

SECRET_NAMES = [
    "HF_TOKEN",
    "hf_token",  # environment names are case-sensitive on Linux, but a lower-case token is still a token
    "GITHUB_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "AWS_SECRET",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "MY_API_KEY",
    "TOKEN",
    "DB_PASSWORD",
    "PASSWORD",
]

NOT_SECRET_NAMES = [
    "PATH",
    "HOME",
    # it ends in _PARALLELISM, and "TOKENIZERS" is not "_TOKEN" at the end
    "TOKENIZERS_PARALLELISM",
    # a path to a token file is not the token
    "HF_TOKEN_PATH",
    "HF_HUB_ENABLE_HF_TRANSFER",
    "PYTHONHASHSEED",
    "KEY",  # no prefix: too generic to assume a secret
    "MONKEY",  # ends in KEY, but not _KEY
    "CUDA_VISIBLE_DEVICES",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names(name: str) -> None:
    assert secrets.is_secret_name(name)


@pytest.mark.parametrize("name", NOT_SECRET_NAMES)
def test_not_secret_names(name: str) -> None:
    assert not secrets.is_secret_name(name)
    # kept as is, next to a secret that is masked
    assert secrets.redact_environ({name: "value-1234", "HF_TOKEN": "hf_abcdefgh"}) == {name: "value-1234", "HF_TOKEN": "***"}


def test_secret_values_only_of_secret_names_and_long_enough() -> None:
    environ = {"HF_TOKEN": "hf_abcdefgh", "PATH": "/usr/bin", "TOKENIZERS_PARALLELISM": "false", "SHORT_TOKEN": "abc", "EDGE_KEY": "abcd"}
    assert secrets.secret_values(environ) == ["hf_abcdefgh", "abcd"]


def test_secret_values_longest_first_and_deduplicated() -> None:
    environ = {"A_TOKEN": "hf_abcd", "B_TOKEN": "hf_abcd_extended", "C_KEY": "hf_abcd", "D_SECRET": "hf_abcd_ext"}
    assert secrets.secret_values(environ) == ["hf_abcd_extended", "hf_abcd_ext", "hf_abcd"]


def test_mask_replaces_every_occurrence() -> None:
    text = "token=hf_abcdefgh; again hf_abcdefgh and hf_abcdefgh!"
    assert secrets.mask(text, ["hf_abcdefgh"]) == "token=***; again *** and ***!"


def test_mask_a_secret_containing_another_is_masked_whole() -> None:
    environ = {"HF_TOKEN": "hf_abcdef", "HF_TOKEN_FULL_TOKEN": "hf_abcdef123456"}
    text = "long hf_abcdef123456 short hf_abcdef"
    masked = secrets.mask(text, secrets.secret_values(environ))
    assert masked == "long *** short ***"
    assert "123456" not in masked


def test_short_values_are_not_masked() -> None:
    environ = {"RETRY_TOKEN": "1", "HF_TOKEN": "hf_abcdefgh"}
    text = "step 1 of 10 with hf_abcdefgh"
    assert secrets.mask(text, secrets.secret_values(environ)) == "step 1 of 10 with ***"


def test_mask_without_secrets_is_identity() -> None:
    assert secrets.mask("nothing to hide", []) == "nothing to hide"


def test_redact_environ_keeps_names_masks_values() -> None:
    environ = {"PATH": "/usr/bin", "HF_TOKEN": "hf_abcdefgh", "TOKENIZERS_PARALLELISM": "false", "SHORT_TOKEN": "x"}
    assert secrets.redact_environ(environ) == {
        "HF_TOKEN": "***",
        "PATH": "/usr/bin",
        "SHORT_TOKEN": "***",
        "TOKENIZERS_PARALLELISM": "false",
    }
    assert list(secrets.redact_environ(environ)) == sorted(environ)
