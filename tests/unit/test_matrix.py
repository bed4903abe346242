"""matrix.py: parsing and validating matrix files, picking releases, expanding cells."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from harness.errors import EXIT_BAD_INPUT, BadInput, MatrixError
from harness.inputs.matrix import AxisEntry, Candidate, Cell, Settings, expand, git_ref, git_url_without_ref, parse_matrix, pick_versions

SHA = "0123456789abcdef0123456789abcdef01234567"
HF = "git+https://github.com/huggingface/transformers"

# -- valid files ------------------------------------------------------------------------------

#: (axes section as written, the axes parse_matrix must return)
VALID_AXES = [
    pytest.param(
        'torch = ["2.13.0"]\ntransformers = ["5.6.2", "5.23.0"]',
        {"torch": [AxisEntry("version", "2.13.0")], "transformers": [AxisEntry("version", "5.6.2"), AxisEntry("version", "5.23.0")]},
        id="list-of-versions",
    ),
    pytest.param('torch = "2.13.0"', {"torch": [AxisEntry("version", "2.13.0")]}, id="single-string-is-a-one-entry-axis"),
    pytest.param('peft = [" 0.19.1 "]', {"peft": [AxisEntry("version", "0.19.1")]}, id="whitespace-stripped"),
    pytest.param('accelerate = [">=1.10,<1.16"]', {"accelerate": [AxisEntry("specifier", ">=1.10,<1.16")]}, id="bare-specifier"),
    pytest.param('accelerate = ["==1.13.*"]', {"accelerate": [AxisEntry("specifier", "==1.13.*")]}, id="wildcard-specifier"),
    pytest.param(
        'transformers = [{specifier = ">=5.5,<6", pick = "newest-minor", limit = 2}]',
        {"transformers": [AxisEntry("specifier", ">=5.5,<6", "newest-minor", 2)]},
        id="specifier-table-pick-limit",
    ),
    pytest.param(
        'transformers = [{specifier = ">=5.5"}]',
        {"transformers": [AxisEntry("specifier", ">=5.5", "all", 0)]},
        id="specifier-table-defaults",
    ),
    pytest.param(
        f'transformers = ["{HF}@main", "{HF}@v5.6.2", "{HF}", "git+file:///src/transformers@{SHA}", "git+ssh://host.example/org/repo@dev"]',
        {
            "transformers": [
                AxisEntry("git", f"{HF}@main"),
                AxisEntry("git", f"{HF}@v5.6.2"),
                AxisEntry("git", HF),
                AxisEntry("git", f"git+file:///src/transformers@{SHA}"),
                AxisEntry("git", "git+ssh://host.example/org/repo@dev"),
            ]
        },
        id="git-sources",
    ),
    pytest.param(
        'peft = ["./checkouts/peft", "../peft", "/abs/peft", "~/src/peft", "file:///abs/other"]',
        {
            "peft": [
                AxisEntry("path", "./checkouts/peft"),
                AxisEntry("path", "../peft"),
                AxisEntry("path", "/abs/peft"),
                AxisEntry("path", "~/src/peft"),
                AxisEntry("path", "/abs/other"),
            ]
        },
        id="paths",
    ),
    pytest.param('torch = ["inherit", "2.13.0"]', {"torch": [AxisEntry("inherit"), AxisEntry("version", "2.13.0")]}, id="inherit"),
    pytest.param(
        'BitsAndBytes = ["0.49.2"]\nFlash_Attn = ["2.7.0"]',
        {"bitsandbytes": [AxisEntry("version", "0.49.2")], "flash-attn": [AxisEntry("version", "2.7.0")]},
        id="axis-names-canonicalized",
    ),
]


@pytest.mark.parametrize(("axes_text", "expected"), VALID_AXES)
def test_parse_valid_axes(axes_text: str, expected: dict[str, list[AxisEntry]]) -> None:
    spec = parse_matrix(f"[axes]\n{axes_text}\n", "m.toml")
    assert spec.axes == expected
    assert list(spec.axes) == list(expected)  # axis order is the file's order: it is the cell-id order
    assert spec.source == "m.toml"


def test_parse_minimal_file_takes_default_settings() -> None:
    spec = parse_matrix('[axes]\ntorch = ["2.13.0"]\n')
    assert spec.settings == Settings()
    assert (spec.settings.python, spec.settings.timeout, spec.settings.repeats, spec.settings.isolation) == ("3.11", 300.0, 1, "fork")
    assert spec.include == [] and spec.exclude == []


def test_parse_every_setting() -> None:
    text = """
[matrix]
python = "3.12"
scenarios = ["gemma4_lora_inner_linear"]
timeout = 12.5
repeats = 3
index_url = "https://mirror.example/simple"
extra_index_urls = ["https://download.pytorch.org/whl/cpu"]
find_links = ["$PIP_FIND_LINKS"]
exclude_newer = "period"
isolation = "process"
preload = ["torch"]
extra_requirements = ["safetensors>=0.4"]
env_dir = ".envs"
no_index = true

[axes]
torch = ["2.13.0"]
"""
    s = parse_matrix(text).settings
    assert s == Settings(
        python="3.12",
        scenarios=["gemma4_lora_inner_linear"],
        timeout=12.5,
        repeats=3,
        index_url="https://mirror.example/simple",
        extra_index_urls=["https://download.pytorch.org/whl/cpu"],
        find_links=["$PIP_FIND_LINKS"],
        no_index=True,
        exclude_newer="period",
        isolation="process",
        preload=["torch"],
        extra_requirements=["safetensors>=0.4"],
        env_dir=".envs",
    )


def test_parse_exclude_newer_date_is_accepted() -> None:
    assert parse_matrix('[matrix]\nexclude_newer = "2026-04-24"\n[axes]\ntorch = ["2.13.0"]').settings.exclude_newer == "2026-04-24"


def test_parse_include_and_exclude() -> None:
    text = f"""
[axes]
torch = ["2.13.0"]
Transformers = ["5.6.2", "5.23.0"]
peft = ["0.19.1", "inherit"]

[[include]]
transformers = "{HF}@main"

[[include]]
Transformers = " 5.6.2 "
peft = "inherit"

[[exclude]]
transformers = "5.23.0"
peft = "0.19.1"
"""
    spec = parse_matrix(text)
    assert spec.include == [{"transformers": f"{HF}@main"}, {"transformers": "5.6.2", "peft": "inherit"}]
    assert spec.exclude == [{"transformers": "5.23.0", "peft": "0.19.1"}]


def test_the_shipped_matrix_file_parses() -> None:
    spec = parse_matrix((Path(__file__).resolve().parents[2] / "matrix.toml").read_text())
    assert {"torch", "transformers"} <= set(spec.axes)
    assert all(spec.axes.values())


# -- invalid files ----------------------------------------------------------------------------

AXES_OK = '[axes]\ntorch = ["2.13.0"]\n'

#: (file text, one substring per expected problem, in order). Each file has exactly these mistakes.
INVALID = [
    # "matrixx" is a typo of the [matrix] table
    pytest.param("[matrixx]\n" + AXES_OK, ["unknown top-level key 'matrixx'"], id="unknown-top-level-key"),
    # "timout" is a typo of timeout
    pytest.param("[matrix]\ntimout = 10\n" + AXES_OK, ["unknown key 'timout' in [matrix]"], id="unknown-matrix-key"),
    # [matrix] must be a table, not a number
    pytest.param("matrix = 3\n" + AXES_OK, ["[matrix] must be a table"], id="matrix-not-a-table"),
    # python = 3.11 is a TOML float; "3.11" was meant
    pytest.param(
        "[matrix]\npython = 3.11\n" + AXES_OK, ["[matrix] python = 3.11 has the wrong type; expected a string"], id="python-float"
    ),
    # a quoted number is a string, not a number of seconds
    pytest.param('[matrix]\ntimeout = "300"\n' + AXES_OK, ["[matrix] timeout = '300' has the wrong type"], id="timeout-string"),
    # true is not a count of repeats (bool is an int subclass in Python)
    pytest.param(
        "[matrix]\nrepeats = true\n" + AXES_OK, ["[matrix] repeats = True has the wrong type; expected an integer"], id="repeats-bool"
    ),
    # repeats must be an integer, not 1.5
    pytest.param("[matrix]\nrepeats = 1.5\n" + AXES_OK, ["[matrix] repeats = 1.5 has the wrong type"], id="repeats-float"),
    # scenarios is a list of names, not one string
    pytest.param(
        '[matrix]\nscenarios = "a"\n' + AXES_OK, ["[matrix] scenarios = 'a' has the wrong type; expected a list"], id="scenarios-string"
    ),
    # no_index is a boolean
    pytest.param(
        '[matrix]\nno_index = "yes"\n' + AXES_OK,
        ["[matrix] no_index = 'yes' has the wrong type; expected true or false"],
        id="no-index-string",
    ),
    # a timeout of zero seconds can never pass
    pytest.param("[matrix]\ntimeout = 0\n" + AXES_OK, ["[matrix] timeout = 0 must be a positive number"], id="timeout-zero"),
    # a negative timeout
    pytest.param("[matrix]\ntimeout = -5.0\n" + AXES_OK, ["[matrix] timeout = -5.0 must be a positive number"], id="timeout-negative"),
    # zero repeats runs nothing
    pytest.param("[matrix]\nrepeats = 0\n" + AXES_OK, ["[matrix] repeats = 0 must be at least 1"], id="repeats-zero"),
    # only fork and process isolation exist
    pytest.param('[matrix]\nisolation = "thread"\n' + AXES_OK, ["[matrix] isolation = 'thread'"], id="isolation-unknown"),
    # exclude_newer is "period" or a date
    pytest.param('[matrix]\nexclude_newer = "yesterday"\n' + AXES_OK, ["[matrix] exclude_newer = 'yesterday'"], id="exclude-newer-word"),
    # a matrix with no axes has no cells
    pytest.param('[matrix]\npython = "3.11"\n', ["[axes] must be a table with at least one axis"], id="no-axes"),
    # an empty [axes] table has no cells either
    pytest.param("[axes]\n", ["[axes] must be a table with at least one axis"], id="empty-axes"),
    # an axis with no entries
    pytest.param("[axes]\ntorch = []\n", ["axis 'torch' is empty"], id="empty-axis"),
    # 2.13 unquoted is a TOML float, not a version string
    pytest.param("[axes]\ntorch = [2.13]\n", ["axis 'torch': 2.13 is not a version string or table"], id="version-float"),
    # "latest" is neither a version nor a specifier
    pytest.param('[axes]\ntorch = ["latest"]\n', ["axis 'torch': invalid version 'latest'"], id="version-word"),
    # "5.6.2.x" is not PEP 440
    pytest.param('[axes]\ntransformers = ["5.6.2.x"]\n', ["axis 'transformers': invalid version '5.6.2.x'"], id="version-garbage"),
    # ">>" is not a specifier operator
    pytest.param('[axes]\ntorch = [">>2"]\n', ["axis 'torch': invalid specifier '>>2'"], id="bad-specifier"),
    # "~=" needs at least two release components
    pytest.param('[axes]\ntorch = [{specifier = "~=1"}]\n', ["axis 'torch': invalid specifier '~=1'"], id="bad-specifier-table"),
    # a table without specifier = ...
    pytest.param('[axes]\ntorch = [{pick = "newest"}]\n', ["axis 'torch': a table needs specifier"], id="table-without-specifier"),
    # "newest" belongs in pick, not as a key of its own
    pytest.param(
        '[axes]\ntorch = [{specifier = ">=2", newest = true}]\n', ["unknown key(s) ['newest'] in specifier table"], id="table-unknown-key"
    ),
    # "latest" is not one of the picks
    pytest.param('[axes]\ntorch = [{specifier = ">=2", pick = "latest"}]\n', ["axis 'torch': pick = 'latest'"], id="bad-pick"),
    # a negative limit
    pytest.param(
        '[axes]\ntorch = [{specifier = ">=2", limit = -1}]\n',
        ["axis 'torch': limit = -1 must be a non-negative integer"],
        id="negative-limit",
    ),
    # a limit must be an integer, not a string
    pytest.param(
        '[axes]\ntorch = [{specifier = ">=2", limit = "2"}]\n',
        ["axis 'torch': limit = '2' must be a non-negative integer"],
        id="string-limit",
    ),
    # scp-like git address: pip needs git+ssh://
    pytest.param(
        '[axes]\ntransformers = ["git@github.com:huggingface/transformers"]\n',
        ["bad git source 'git@github.com:huggingface/transformers'"],
        id="git-scp-syntax",
    ),
    # pip has no git+ftp
    pytest.param('[axes]\ntransformers = ["git+ftp://host/repo@main"]\n', ["bad git source 'git+ftp://host/repo@main'"], id="git-ftp"),
    # a trailing @ names no ref
    pytest.param(f'[axes]\ntransformers = ["{HF}@"]\n', [f"bad git source '{HF}@'"], id="git-empty-ref"),
    # a space inside a URL
    pytest.param('[axes]\ntransformers = ["git+https://github.com/hugging face/transformers"]\n', ["bad git source"], id="git-space"),
    # trl is not an axis: an include cannot pin it
    pytest.param(AXES_OK + '[[include]]\ntrl = "0.20.0"\n', ["[[include]] #1 names 'trl', which is not an axis"], id="include-non-axis"),
    # the second exclude names peft, which is not an axis
    pytest.param(
        AXES_OK + '[[exclude]]\ntorch = "2.13.0"\n[[exclude]]\npeft = "0.19.1"\n',
        ["[[exclude]] #2 names 'peft', which is not an axis"],
        id="exclude-non-axis",
    ),
    # an include pins one version, not a range
    pytest.param(AXES_OK + '[[include]]\ntorch = ">=2"\n', ["[[include]] #1: torch = '>=2' must be one version"], id="include-specifier"),
    # an include value must be a string
    pytest.param(AXES_OK + "[[include]]\ntorch = 2\n", ["[[include]] #1: torch = 2 must be a string"], id="include-number"),
    # an exclude with a version that is not PEP 440
    pytest.param(AXES_OK + '[[exclude]]\ntorch = "banana"\n', ["axis 'torch': invalid version 'banana'"], id="exclude-invalid-version"),
    # include must be an array of tables, not one inline table
    pytest.param(
        AXES_OK.replace("[axes]\n", 'include = {torch = "2.13.0"}\n[axes]\n'),
        ["[[include]] must be an array of tables"],
        id="include-not-array",
    ),
    # each include entry must be a table
    pytest.param(
        AXES_OK.replace("[axes]\n", 'exclude = ["torch"]\n[axes]\n'), ["[[exclude]] #1 must be a table"], id="exclude-entry-not-table"
    ),
    # BUG cases: wrong values the parser lets through
    pytest.param(
        # true is not a number of seconds
        "[matrix]\ntimeout = true\n" + AXES_OK,
        ["[matrix] timeout = True has the wrong type"],
        id="timeout-bool",
    ),
    pytest.param(
        # scenario names must be strings; select() later crashes with AttributeError on 1.endswith
        "[matrix]\nscenarios = [1, 2]\n" + AXES_OK,
        ["[matrix] scenarios"],
        id="scenarios-list-of-ints",
    ),
    pytest.param(
        # true is not a count of releases
        '[axes]\ntorch = [{specifier = ">=2", limit = true}]\n',
        ["limit = True"],
        id="limit-bool",
    ),
    pytest.param(
        # two mistakes in one specifier table: both must be reported
        '[axes]\ntorch = [{specifier = ">=2", pick = "latest", limit = -1}]\n',
        ["pick = 'latest'", "limit = -1"],
        id="table-two-mistakes",
    ),
]


@pytest.mark.parametrize(("text", "expected"), INVALID)
def test_parse_invalid_reports_each_mistake(text: str, expected: list[str]) -> None:
    with pytest.raises(MatrixError) as info:
        parse_matrix(text, "bad.toml")
    problems = info.value.problems
    assert len(problems) == len(expected), problems
    for problem, fragment in zip(problems, expected, strict=True):
        assert fragment in problem


VALID_BUT_REJECTED = [
    pytest.param(
        # the usual ssh form: user git@, then @ref; pip accepts it
        "git+ssh://git@github.com/huggingface/transformers@v5.6.2",
        AxisEntry("git", "git+ssh://git@github.com/huggingface/transformers@v5.6.2"),
        id="git-ssh-user-and-ref",
    ),
]


@pytest.mark.parametrize(("value", "expected"), VALID_BUT_REJECTED)
def test_parse_accepts_standard_git_urls(value: str, expected: AxisEntry) -> None:
    assert parse_matrix(f'[axes]\ntransformers = ["{value}"]\n').axes["transformers"] == [expected]


def test_every_mistake_is_reported_at_once() -> None:
    text = f"""
colour = "red"

[matrix]
repeats = 0

[axes]
torch = ["two"]
transformers = ["{HF.replace("https", "ftp")}@main"]
"""
    with pytest.raises(MatrixError) as info:
        parse_matrix(text, "four.toml")
    err = info.value
    assert len(err.problems) == 4, err.problems
    assert "unknown top-level key 'colour'" in err.problems[0]
    assert "repeats = 0" in err.problems[1]
    assert "invalid version 'two'" in err.problems[2]
    assert "bad git source" in err.problems[3]
    assert str(err).startswith("four.toml: 4 problem(s): ")
    assert err.source == "four.toml"


def test_mistakes_in_every_section_are_all_reported() -> None:
    text = """
[matrix]
isolation = "vm"
timeout = "soon"

[axes]
torch = ["latest", ">>1"]
peft = [{specifier = ">=0.1", pick = "oldest"}]

[[include]]
trl = "1.0"

[[exclude]]
torch = ">=2"
"""
    with pytest.raises(MatrixError) as info:
        parse_matrix(text)
    fragments = [
        "timeout = 'soon'",
        "isolation = 'vm'",
        "invalid version 'latest'",
        "invalid specifier '>>1'",
        "pick = 'oldest'",
        "names 'trl'",
        "torch = '>=2' must be one version",
    ]
    assert len(info.value.problems) == len(fragments), info.value.problems
    for fragment in fragments:
        assert any(fragment in p for p in info.value.problems), fragment


def test_malformed_toml_is_one_problem_and_bad_input() -> None:
    with pytest.raises(MatrixError) as info:
        parse_matrix('[axes\ntorch = ["2.13.0"]\n', "broken.toml")
    assert len(info.value.problems) == 1
    assert info.value.problems[0].startswith("malformed TOML")
    assert isinstance(info.value, BadInput) and isinstance(info.value, ValueError)
    assert info.value.exit_code == EXIT_BAD_INPUT


# -- pick_versions ----------------------------------------------------------------------------

#: Unsorted, with a duplicate; "1.9.5" < "1.10.0" only as versions, not as strings.
RELEASES = ["1.11.0", "1.10.0", "2.0.1", "1.11.2", "1.9.5", "1.10.1", "1.11.1", "2.0.0", "1.11.2"]

PICKS = [
    ("all", 0, ["1.9.5", "1.10.0", "1.10.1", "1.11.0", "1.11.1", "1.11.2", "2.0.0", "2.0.1"]),
    ("newest-patch", 0, ["1.9.5", "1.10.1", "1.11.2", "2.0.1"]),
    ("newest-minor", 0, ["1.11.2", "2.0.1"]),
    ("newest", 0, ["2.0.1"]),
    ("all", 2, ["2.0.0", "2.0.1"]),
    ("newest-patch", 3, ["1.10.1", "1.11.2", "2.0.1"]),
    ("newest-minor", 1, ["2.0.1"]),
    ("newest", 5, ["2.0.1"]),
    ("all", 100, ["1.9.5", "1.10.0", "1.10.1", "1.11.0", "1.11.1", "1.11.2", "2.0.0", "2.0.1"]),
]


@pytest.mark.parametrize(("pick", "limit", "expected"), PICKS)
def test_pick_versions(pick: str, limit: int, expected: list[str]) -> None:
    chosen = pick_versions([Version(v) for v in RELEASES], pick, limit)  # type: ignore[arg-type]
    assert [str(v) for v in chosen] == expected


def test_pick_versions_newest_patch_prefers_final_over_prerelease() -> None:
    chosen = pick_versions([Version(v) for v in ["5.0.0rc1", "5.0.0", "5.0.1.dev0"]], "newest-patch")
    assert chosen == [Version("5.0.1.dev0")]
    assert pick_versions([], "newest") == []


# -- expand -----------------------------------------------------------------------------------


def v(package: str, version: str) -> Candidate:
    return Candidate(package, "version", version)


DEFAULT_AXES = {
    "torch": [v("torch", "2.13.0")],
    "transformers": [v("transformers", "5.6.2"), v("transformers", "5.23.0")],
    "accelerate": [v("accelerate", "1.13.0"), v("accelerate", "1.15.0")],
    "peft": [v("peft", "0.19.1"), v("peft", "0.21.2")],
    "bitsandbytes": [v("bitsandbytes", "0.49.2")],
}


def test_expand_ids_are_readable_and_in_cartesian_order() -> None:
    cells = expand(DEFAULT_AXES, "3.11")
    assert [c.id for c in cells] == [
        "torch2.13.0-tf5.6.2-acc1.13.0-peft0.19.1-bnb0.49.2",
        "torch2.13.0-tf5.6.2-acc1.13.0-peft0.21.2-bnb0.49.2",
        "torch2.13.0-tf5.6.2-acc1.15.0-peft0.19.1-bnb0.49.2",
        "torch2.13.0-tf5.6.2-acc1.15.0-peft0.21.2-bnb0.49.2",
        "torch2.13.0-tf5.23.0-acc1.13.0-peft0.19.1-bnb0.49.2",
        "torch2.13.0-tf5.23.0-acc1.13.0-peft0.21.2-bnb0.49.2",
        "torch2.13.0-tf5.23.0-acc1.15.0-peft0.19.1-bnb0.49.2",
        "torch2.13.0-tf5.23.0-acc1.15.0-peft0.21.2-bnb0.49.2",
    ]
    assert all(c.python == "3.11" for c in cells)
    assert [c.id for c in expand(DEFAULT_AXES, "3.11")] == [c.id for c in cells]  # stable


def test_cell_accessors() -> None:
    cell = Cell((v("torch", "2.13.0"), Candidate("transformers", "git", f"{HF}@main", SHA), Candidate("peft", "inherit")), "3.12")
    assert cell.id == "torch2.13.0-tf-git-main-peft-inherit"
    assert str(cell) == f"torch=2.13.0, transformers={HF}@main, peft=inherit"
    assert cell.as_dict() == {"torch": "2.13.0", "transformers": f"{HF}@main", "peft": "inherit"}
    assert cell.candidate("transformers") == Candidate("transformers", "git", f"{HF}@main", SHA)
    assert cell.candidate("accelerate") is None


#: (exclude selectors, ids that must be gone), on a 2×2×1 matrix
EXCLUDES = [
    pytest.param([{"transformers": "5.6.2", "accelerate": "1.15.0"}], ["torch2.13.0-tf5.6.2-acc1.15.0"], id="partial-match-two-axes"),
    pytest.param([{"transformers": "5.23.0"}], ["torch2.13.0-tf5.23.0-acc1.13.0", "torch2.13.0-tf5.23.0-acc1.15.0"], id="one-axis"),
    pytest.param([{"transformers": "5.6.2", "accelerate": "9.9.9"}], [], id="no-cell-has-both"),
    pytest.param(
        [{"accelerate": "1.13.0"}, {"accelerate": "1.15.0"}],
        [
            "torch2.13.0-tf5.6.2-acc1.13.0",
            "torch2.13.0-tf5.6.2-acc1.15.0",
            "torch2.13.0-tf5.23.0-acc1.13.0",
            "torch2.13.0-tf5.23.0-acc1.15.0",
        ],
        id="everything",
    ),
    pytest.param([{"peft": "0.19.1"}], [], id="axis-not-in-matrix-matches-nothing"),
    pytest.param(
        # "2.13" and "2.13.0" are the same release (PEP 440)
        [{"torch": "2.13"}],
        [
            "torch2.13.0-tf5.6.2-acc1.13.0",
            "torch2.13.0-tf5.6.2-acc1.15.0",
            "torch2.13.0-tf5.23.0-acc1.13.0",
            "torch2.13.0-tf5.23.0-acc1.15.0",
        ],
        id="equal-version-spelled-differently",
    ),
]

SMALL_AXES = {
    "torch": [v("torch", "2.13.0")],
    "transformers": [v("transformers", "5.6.2"), v("transformers", "5.23.0")],
    "accelerate": [v("accelerate", "1.13.0"), v("accelerate", "1.15.0")],
}
SMALL_IDS = [
    "torch2.13.0-tf5.6.2-acc1.13.0",
    "torch2.13.0-tf5.6.2-acc1.15.0",
    "torch2.13.0-tf5.23.0-acc1.13.0",
    "torch2.13.0-tf5.23.0-acc1.15.0",
]


@pytest.mark.parametrize(("exclude", "gone"), EXCLUDES)
def test_expand_excludes(exclude: list[dict[str, str]], gone: list[str]) -> None:
    ids = [c.id for c in expand(SMALL_AXES, "3.11", exclude=exclude)]
    assert ids == [i for i in SMALL_IDS if i not in gone]


def test_expand_exclude_matches_inherit() -> None:
    axes = {"torch": [Candidate("torch", "inherit"), v("torch", "2.13.0")], "peft": [v("peft", "0.19.1")]}
    assert [c.id for c in expand(axes, "3.11", exclude=[{"torch": "inherit"}])] == ["torch2.13.0-peft0.19.1"]
    assert [c.id for c in expand(axes, "3.11", exclude=[{"torch": "2.13.0"}])] == ["torch-inherit-peft0.19.1"]


def test_expand_include_fills_missing_axes_with_the_newest_version() -> None:
    # newest by Version, not by position or string order ("5.6.2" > "5.23.0" as strings)
    axes = {"torch": [v("torch", "2.13.0"), v("torch", "2.9.1")], "transformers": [v("transformers", "5.23.0"), v("transformers", "5.6.2")]}
    git = Candidate("transformers", "git", f"{HF}@main", SHA)
    cells = expand(axes, "3.11", include=[{"transformers": git}], exclude=[{"torch": "2.9.1"}])
    assert [c.id for c in cells] == ["torch2.13.0-tf5.23.0", "torch2.13.0-tf5.6.2", "torch2.13.0-tf-git-main"]
    assert cells[-1].candidate("transformers") == git


def test_expand_include_fills_with_newest_not_last() -> None:
    axes = {"torch": [v("torch", "2.13.0"), v("torch", "2.9.1")], "peft": [v("peft", "0.19.1")]}
    cells = expand(axes, "3.11", include=[{"peft": Candidate("peft", "inherit")}])
    assert cells[-1].id == "torch2.13.0-peft-inherit"


def test_expand_include_of_existing_cell_is_not_duplicated() -> None:
    include = [
        {"transformers": v("transformers", "5.6.2"), "accelerate": v("accelerate", "1.13.0")},
        {"accelerate": v("accelerate", "1.15.0")},
    ]
    ids = [c.id for c in expand(SMALL_AXES, "3.11", include=include)]
    assert ids == SMALL_IDS
    assert len(ids) == len(set(ids))


def test_expand_include_readds_an_excluded_cell() -> None:
    # product minus excludes, plus includes: an include is explicit and wins
    include = [{"transformers": v("transformers", "5.6.2"), "accelerate": v("accelerate", "1.13.0")}]
    ids = [c.id for c in expand(SMALL_AXES, "3.11", include=include, exclude=[{"accelerate": "1.13.0"}])]
    assert ids == ["torch2.13.0-tf5.6.2-acc1.15.0", "torch2.13.0-tf5.23.0-acc1.15.0", "torch2.13.0-tf5.6.2-acc1.13.0"]


def test_expand_keeps_distinct_git_sources_with_the_same_ref() -> None:
    axes = {
        "transformers": [
            Candidate("transformers", "git", f"{HF}@main"),
            Candidate("transformers", "git", "git+https://github.com/myfork/transformers@main"),
        ]
    }
    assert len(expand(axes, "3.11")) == 2


def test_expand_keeps_distinct_paths_with_the_same_name() -> None:
    axes = {"peft": [Candidate("peft", "path", "/a/peft"), Candidate("peft", "path", "/b/peft")]}
    assert len(expand(axes, "3.11")) == 2


# -- Candidate --------------------------------------------------------------------------------

REQUIREMENTS = [
    (v("torch", "2.13.0"), "torch==2.13.0"),
    (v("bitsandbytes", "0.49.2"), "bitsandbytes==0.49.2"),
    (Candidate("transformers", "git", f"{HF}@main"), f"transformers @ {HF}@main"),
    (Candidate("transformers", "git", f"{HF}@main", SHA), f"transformers @ {HF}@{SHA}"),
    (Candidate("transformers", "git", HF, SHA), f"transformers @ {HF}@{SHA}"),
    (Candidate("peft", "git", "git+file:///src/peft@v0.19.1", SHA), f"peft @ git+file:///src/peft@{SHA}"),
    (Candidate("torch", "inherit"), "torch"),
    pytest.param(
        Candidate("transformers", "git", "git+ssh://git@github.com/huggingface/transformers", SHA),
        f"transformers @ git+ssh://git@github.com/huggingface/transformers@{SHA}",
        id="git-ssh-user-no-ref",
    ),
]


@pytest.mark.parametrize(("candidate", "expected"), REQUIREMENTS)
def test_candidate_requirement(candidate: Candidate, expected: str) -> None:
    assert candidate.requirement() == expected


def test_candidate_requirement_for_path_is_an_absolute_file_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "peft").mkdir()
    monkeypatch.chdir(tmp_path)
    assert Candidate("peft", "path", "./peft").requirement() == f"peft @ {(tmp_path / 'peft').resolve().as_uri()}"
    assert Candidate("peft", "path", "./peft").requirement().startswith("peft @ file:///")


LABELS = [
    (v("torch", "2.13.0"), "torch2.13.0"),
    (v("transformers", "5.6.2"), "tf5.6.2"),
    (v("accelerate", "1.13.0"), "acc1.13.0"),
    (v("bitsandbytes", "0.49.2"), "bnb0.49.2"),
    (v("peft", "0.19.1"), "peft0.19.1"),
    (v("trl", "0.20.0"), "trl0.20.0"),
    (Candidate("transformers", "git", f"{HF}@main", SHA), "tf-git-main"),
    (Candidate("transformers", "git", f"{HF}@v5.6.2"), "tf-git-v5.6.2"),
    (Candidate("transformers", "git", f"{HF}@refs/pull/123/head"), "tf-git-refs-pull-123-head"),
    (Candidate("transformers", "git", HF), "tf-git-HEAD"),
    (Candidate("transformers", "git", f"{HF}@{SHA}"), f"tf-git-{SHA[:24]}"),
    (Candidate("accelerate", "git", "git+file:///src/accelerate@feature/fix-meta"), "acc-git-feature-fix-meta"),
    (Candidate("peft", "path", "/src/checkouts/peft"), "peft-path-peft"),
    (Candidate("torch", "inherit"), "torch-inherit"),
    pytest.param(
        Candidate("transformers", "git", "git+ssh://git@github.com/huggingface/transformers"),
        "tf-git-HEAD",
        id="git-ssh-user-no-ref",
    ),
]


@pytest.mark.parametrize(("candidate", "expected"), LABELS)
def test_candidate_label(candidate: Candidate, expected: str) -> None:
    assert candidate.label() == expected


GIT_URLS = [
    (f"{HF}@main", HF, "main"),
    (HF, HF, "HEAD"),
    (f"git+file:///src/repo@{SHA}", "git+file:///src/repo", SHA),
    (f"{HF}@refs/pull/1/head", HF, "refs/pull/1/head"),
]


@pytest.mark.parametrize(("url", "without_ref", "ref"), GIT_URLS)
def test_git_url_parts(url: str, without_ref: str, ref: str) -> None:
    assert git_url_without_ref(url) == without_ref
    assert git_ref(url) == ref


def test_candidate_sort_key_orders_versions_numerically_before_other_kinds() -> None:
    cands = [Candidate("t", "inherit"), v("t", "5.23.0"), Candidate("t", "git", f"{HF}@main"), v("t", "5.6.2")]
    assert [c.value for c in sorted(cands, key=Candidate.sort_key)] == ["5.6.2", "5.23.0", "", f"{HF}@main"]
