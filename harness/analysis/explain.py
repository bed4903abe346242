"""Why a test changed between two runs: what moved in its cell, and the one move that, alone, does it. Pure.

Between two nightly runs of one cell, several things may move at once: packages the resolver
picks afresh under the pins, a git axis's commit (`accelerate@main`), the team's own code, the
test file, the machine. `moves` lists them from what the results file recorded for the two runs
(`Facts`); where exactly one moved, that is the cause and nothing is run. Otherwise `explain`
narrows it by running the changed tests (the probe is given: this module never builds or runs
anything, as `analysis.bisect`):

1. which of the moves: delta debugging (Zeller's ddmin) over them, each probe the night before's
   state with a subset of the moves applied (one at a time where few moved): the smallest set
   that reproduces the change ("needs both huggingface-hub 2.4.0 and httpx 0.28.1");
2. within a git axis's or the team's commit range among them: bisection of the commits
   (`analysis.bisect`), the first commit that shows the change;
3. flake-aware, as culprit finders in large CI systems are: every probe runs the tests with
   repeats, and one whose repeats disagree (`Look.FLAKY`) stops the search: inconclusive
   (flaky), never a culprit; the culprit found is looked at a second time, and if it does not
   show the change again, the answer is inconclusive too;
4. within a budget of probes: what it left unexplained is said (the moves or commits still in play).

A probe's `Look` is what the changed tests showed there: the state of the night before
(`BEFORE`), the state of the change's night (`AFTER`), neither (`OTHER`: another failure, not
collected), or no answer (`UNBUILT`: the probe's environment did not resolve or install).

>>> moved = [Move("package", "idna", "3.6", "3.7"), Move("package", "tinypkg", "1.0", "1.1")]
>>> found = explain(moved, lambda config: Look.AFTER if "tinypkg" in config.names() else Look.BEFORE)
>>> found.describe()
'tinypkg 1.0 → 1.1 (alone reproduces it; 3 probe(s))'
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from harness.analysis.bisect import Inconclusive, Probe, Verdict, bisect
from harness.analysis.status import FAILURES, Status

MoveKind = Literal["package", "git", "code", "file", "config", "machine"]
#: Moves a probe can undo: a package's version, a git axis's commit, the team's commit.
PROBEABLE: frozenset[str] = frozenset({"package", "git", "code"})
_PR = re.compile(r"\(#(\d+)\)|[Mm]erge pull request #(\d+)")


@dataclass(frozen=True)
class Move:
    """One thing that differed between the two runs around a change, in its cell."""

    kind: MoveKind
    name: str  # the package or git axis; the repository of the team's code; a test file; "config"; driver, cuda, gpu
    before: str
    after: str
    commits: int = -1  # commits from `before` to `after` (a git axis, the team's code); -1: not known

    @property
    def probeable(self) -> bool:
        return self.kind in PROBEABLE

    @property
    def ranged(self) -> bool:
        """A range of commits a bisection can walk."""
        return self.kind in ("git", "code")

    def describe(self) -> str:
        """`huggingface-hub 1.33.0 → 2.4.0`, `accelerate a1b2c3d..e4f5a6b (12 commits)`, `your code …`."""
        if self.ranged:
            count = f" ({self.commits} commit{'s' if self.commits != 1 else ''})" if self.commits >= 0 else ""
            who = "your code" if self.kind == "code" else self.name
            return f"{who} {self.before[:7]}..{self.after[:7]}{count}"
        if self.kind == "package":
            return f"{self.name} {self.before or '(not installed)'} → {self.after or '(removed)'}"
        if self.kind == "file":
            return f"{self.name} changed"
        if self.kind == "config":
            return "the suite's configuration changed (conftest.py, pytest's settings)"
        return f"{self.name} {self.before or '?'} → {self.after or '?'}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "before": self.before, "after": self.after, "commits": self.commits}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Move:
        return cls(data["kind"], str(data["name"]), str(data["before"]), str(data["after"]), int(data.get("commits", -1)))


# -- what moved ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Facts:
    """What a results file recorded of one run in one cell: what the outcome depended on."""

    freeze: Mapping[str, str] = field(default_factory=dict)  # installed package -> version, or URL (git, path)
    git: Mapping[str, str] = field(default_factory=dict)  # git axis -> commit
    files: Mapping[str, str] = field(default_factory=dict)  # a test file (from the tests' root) -> its content's digest
    config: str = ""  # the suite's conftest and configuration, digested
    code: str = ""  # the code under test: its source files' content (`fingerprint.code_digest`)
    commit: Mapping[str, str] = field(default_factory=dict)  # {"repo": top, "commit": sha, "dirty"?}
    machine: Mapping[str, str] = field(default_factory=dict)  # driver, cuda, gpu


def moves(before: Facts, after: Facts, files: Iterable[str] = ()) -> list[Move]:
    """What differed between two runs of a cell, for tests in `files`: packages (both versions),
    each git axis's commits, the team's code (its commits, when its source changed: a commit of
    docs alone is no move), the test files and the suite's configuration where the team's code
    did not move with them (outside git), and the machine.

    >>> a = Facts({"idna": "3.6", "tinypkg": "1.0", "accelerate": "git+u@a1"}, {"accelerate": "a1"})
    >>> b = Facts({"idna": "3.7", "tinypkg": "1.0", "accelerate": "git+u@b2"}, {"accelerate": "b2"})
    >>> [m.describe() for m in moves(a, b)]
    ['idna 3.6 → 3.7', 'accelerate a1..b2']
    """
    found: list[Move] = []
    for name in sorted(set(before.freeze) | set(after.freeze)):
        old, new = before.freeze.get(name, ""), after.freeze.get(name, "")
        if old == new or name in before.git or name in after.git or "://" in old + new or " @ " in old + new:
            continue  # the git axes and installed paths are their own moves
        found.append(Move("package", name, old, new))
    for axis in sorted(set(before.git) | set(after.git)):
        if before.git.get(axis, "") != after.git.get(axis, ""):
            found.append(Move("git", axis, before.git.get(axis, ""), after.git.get(axis, "")))
    code_moved = bool(before.code and after.code and before.code != after.code)
    if code_moved:
        found.append(Move("code", after.commit.get("repo", "") or before.commit.get("repo", ""), _sha(before), _sha(after)))
    else:  # the team's code is the same (or not recorded: scenarios): a test or scenario file, or the configuration, moved alone
        found += [
            Move("file", f, before.files.get(f, ""), after.files.get(f, ""))
            for f in sorted(set(files))
            if _moved(before.files, after.files, f)
        ]
        if before.config and after.config and before.config != after.config:
            found.append(Move("config", "config", before.config, after.config))
    for key in sorted(set(before.machine) | set(after.machine)):
        if before.machine.get(key, "") != after.machine.get(key, ""):
            found.append(Move("machine", key, before.machine.get(key, ""), after.machine.get(key, "")))
    return found


def _sha(facts: Facts) -> str:
    return facts.commit.get("commit", "") or facts.code


def _moved(before: Mapping[str, str], after: Mapping[str, str], name: str) -> bool:
    return bool(before.get(name) and after.get(name) and before[name] != after[name])


# -- what a probe showed --------------------------------------------------------------------------
class Look(str, enum.Enum):
    BEFORE = "before"  # the changed tests as the night before showed them
    AFTER = "after"  # as the change's night showed them
    OTHER = "other"  # neither: another failure, a test not collected
    UNBUILT = "unbuilt"  # the probe's environment did not resolve or install: no answer
    FLAKY = "flaky"  # its repeats disagreed


#: A test's state on one side of a change: "pass", or a failure's signature.
State = str


def state_of(status: str, signature: str) -> State:
    """A stored outcome as a side's state: "pass", a failure's signature (its status where it has none), or "" (says nothing)."""
    if status == Status.PASS:
        return "pass"
    return (signature or status) if status in FAILURES else ""


@dataclass(frozen=True)
class Sides:
    """The changed tests of one change in one cell: each test's state before and after, and
    which side fails (a regression fails after, a fix before)."""

    before: Mapping[str, State]
    after: Mapping[str, State]
    regression: bool = True

    def look(self, repeats: Sequence[Mapping[str, State]]) -> Look:
        """What a probe's repeats (each: test -> its state there) show: a repeat is on the failing
        side when any test shows its failing-side state, on the passing side when every test
        shows its passing-side state; repeats on both sides are a flaky probe.

        >>> sides = Sides({"t": "pass"}, {"t": "E"})
        >>> [sides.look(r) for r in ([{"t": "E"}] * 3, [{"t": "pass"}] * 3, [{"t": "E"}, {"t": "pass"}], [{"t": "F"}])]
        [<Look.AFTER: 'after'>, <Look.BEFORE: 'before'>, <Look.FLAKY: 'flaky'>, <Look.OTHER: 'other'>]
        """
        if not repeats:
            return Look.UNBUILT
        failing, passing = (self.after, self.before) if self.regression else (self.before, self.after)
        fail_look, pass_look = (Look.AFTER, Look.BEFORE) if self.regression else (Look.BEFORE, Look.AFTER)
        seen: set[Look] = set()
        for repeat in repeats:
            if any(repeat.get(t) == state for t, state in failing.items() if state != "pass"):
                seen.add(fail_look)
            elif passing and all(repeat.get(t) == state for t, state in passing.items()):
                seen.add(pass_look)
            else:
                seen.add(Look.OTHER)
        if Look.BEFORE in seen and Look.AFTER in seen:
            return Look.FLAKY
        return seen.pop() if len(seen) == 1 else Look.OTHER


# -- the search -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Step:
    """A commit of a range: its sha and subject line."""

    sha: str
    subject: str = ""

    @property
    def pr(self) -> str:
        """The pull request its subject names (`… (#1234)`, `Merge pull request #1234 …`), or ""."""
        found = _PR.search(self.subject)
        return next((g for g in found.groups() if g), "") if found else ""

    def __str__(self) -> str:
        return f"{self.sha[:7]} {self.subject}".strip()


@dataclass(frozen=True)
class Config:
    """What a probe runs: the night before's state with `applied` moves brought to the change's
    night, and `at`: a ranged move (git axis, the team's code) set to one commit of its range."""

    applied: frozenset[Move] = frozenset()
    at: tuple[tuple[Move, Step], ...] = ()

    def names(self) -> set[str]:
        return {m.name for m in self.applied} | {m.name for m, _ in self.at}

    def describe(self) -> str:
        parts = [m.describe() for m in sorted(self.applied, key=_order)]
        parts += [f"{'your code' if m.kind == 'code' else m.name} at {step}" for m, step in self.at]
        return ", ".join(parts) or "the night before"


def _order(move: Move) -> tuple[str, str]:
    return (move.kind, move.name)


@dataclass(frozen=True)
class Probed:
    config: Config
    look: Look
    detail: str = ""


Verdict_ = Literal["static", "culprit", "set", "elsewhere", "nowhere", "flaky", "budget", "nothing"]


@dataclass
class Explanation:
    """What explaining one change found.

    - `static`: only things a probe cannot undo moved (the machine; a test file outside git): named, nothing run;
    - `culprit`: one move reproduces the change alone (`culprits`), with its commit where it is a range (`commit`);
    - `set`: only moves together reproduce it (`culprits`: the smallest such set);
    - `elsewhere`: the night before's env and code show the change already: what moved outside them (the machine) did it;
    - `nowhere`: not even every move together reproduces it here;
    - `flaky`: a probe's repeats disagreed, or the culprit did not show the change a second time: no culprit;
    - `budget`: the budget ran out first (`left`: what is still in play);
    - `nothing`: the file records no move between the two runs.
    """

    verdict: Verdict_
    moves: tuple[Move, ...]
    culprits: tuple[Move, ...] = ()
    commit: Step | None = None  # the first commit (of the ranged culprit) that shows the change
    last_good: Step | None = None
    undecided: tuple[Step, ...] = ()  # commits between last_good and commit no probe could judge
    probes: tuple[Probed, ...] = ()
    left: str = ""  # with `budget`: what was still in play
    why: str = ""  # with `flaky`: which probe disagreed
    link: str = ""  # the culprit commit's page, where its repository is on a forge the harness knows

    def describe(self) -> str:
        """One line: the cause and how it was found."""
        n = f"{len(self.probes)} probe(s)"
        if self.verdict == "nothing":
            return "nothing the results file records moved between the two runs"
        if self.verdict == "static":
            return "; ".join(m.describe() for m in self.moves) + (
                " (the only change)" if len(self.moves) == 1 else " (not probed: none can be undone)"
            )
        if self.verdict == "culprit":
            (move,) = self.culprits
            if self.commit is not None:
                pr = f" (PR #{self.commit.pr})" if self.commit.pr and f"#{self.commit.pr}" not in self.commit.subject else ""
                where = f"{'your commit' if move.kind == 'code' else move.name + ' commit'} {self.commit}{pr}"
                range_ = f" of {move.describe()}"
                undecided = f"; or one of {len(self.undecided)} commit(s) before it that could not be judged" if self.undecided else ""
                return f"{where}{range_}{undecided} ({n if self.probes else 'the only change'})"
            alone = "the only change" if not self.probes else f"alone reproduces it; {n}"
            return f"{move.describe()} ({alone})"
        if self.verdict == "set":
            return "needs all of " + ", ".join(m.describe() for m in self.culprits) + f" (no smaller set reproduces it; {n})"
        if self.verdict == "elsewhere":
            others = "; ".join(m.describe() for m in self.moves if not m.probeable)
            return f"{others} (the night before's env and code show it here too; {n})"
        if self.verdict == "nowhere":
            return f"no subset of what moved reproduces it here, not even all of it ({n}): it came from outside what the file records"
        if self.verdict == "flaky":
            return f"inconclusive (flaky): {self.why} ({n})"
        return f"not explained within the budget ({n}): still in play {self.left}"

    def to_dict(self) -> dict[str, Any]:
        def step(s: Step | None) -> dict[str, str] | None:
            return {"sha": s.sha, "subject": s.subject, "pr": s.pr} if s else None

        return {
            "verdict": self.verdict,
            "text": self.describe(),
            "moves": [m.to_dict() for m in self.moves],
            "culprits": [m.to_dict() for m in self.culprits],
            "commit": step(self.commit),
            "last_good": step(self.last_good),
            "undecided": [s.sha for s in self.undecided],
            "probes": [{"config": p.config.describe(), "look": p.look.value, "detail": p.detail} for p in self.probes],
            "left": self.left,
            "link": self.link,
        }


class _BudgetSpent(Inconclusive):
    """The budget of probes ran out: what is in play is said where the search stood."""


@dataclass
class _Search:
    """The probes of one explanation: each config judged once, counted against the budget."""

    probe: Callable[[Config], Look | tuple[Look, str]]
    budget: int
    spent: Callable[[], bool] = lambda: False  # a budget of minutes
    probes: list[Probed] = field(default_factory=list)
    seen: dict[Config, Look] = field(default_factory=dict)
    left: str = ""  # what is in play now, for a budget that runs out

    def look(self, config: Config, *, again: bool = False) -> Look:
        if config in self.seen and not again:
            return self.seen[config]
        if len(self.probes) >= self.budget or self.spent():
            raise _BudgetSpent(self.left)
        found = self.probe(config)
        look, detail = found if isinstance(found, tuple) else (found, "")
        self.probes.append(Probed(config, look, detail))
        self.seen[config] = look
        if look == Look.FLAKY:
            raise Inconclusive(f"{config.describe()}: its repeats disagreed")
        return look


def explain(
    moved: Sequence[Move],
    probe: Callable[[Config], Look | tuple[Look, str]],
    steps: Callable[[Move], Sequence[Step]] = lambda m: (),
    budget: int = 30,
    spent: Callable[[], bool] = lambda: False,
) -> Explanation:
    """Narrow a change to its cause by probing (module docstring). `probe(config)` runs the
    changed tests with repeats there and says what they showed; `steps(move)` lists a ranged
    move's commits, its `before` end first and its `after` end last (() where it cannot be walked);
    `budget`: the most probes; `spent()`: whether the time allowed is over (checked before each probe)."""
    moves_ = tuple(moved)
    if not moves_:
        return Explanation("nothing", moves_)
    probeable = [m for m in moves_ if m.probeable]
    if not probeable:
        return Explanation("static", moves_)
    if len(moves_) == 1 and (not probeable[0].ranged or len(steps(probeable[0])) <= 2):
        # exactly one thing moved, and there is nothing within it to walk: it is the cause, with no probe
        found_steps = steps(probeable[0]) if probeable[0].ranged else ()
        commit = found_steps[-1] if probeable[0].ranged and len(found_steps) == 2 else None
        return Explanation("culprit", moves_, (probeable[0],), commit, found_steps[0] if commit else None)
    search = _Search(probe, budget, spent)
    try:
        if len(probeable) < len(moves_):
            search.left = "; ".join(m.describe() for m in moves_)
            if search.look(Config()) == Look.AFTER:  # the machine moved too: today's machine, the night before's state
                return Explanation("elsewhere", moves_, tuple(m for m in moves_ if not m.probeable), probes=tuple(search.probes))
        found = probeable if len(probeable) == 1 else _ddmin(probeable, search)
        if found is None:
            return Explanation("nowhere", moves_, probes=tuple(search.probes))
        culprits = tuple(sorted(found, key=_order))
        ranged = [m for m in culprits if m.ranged and len(steps(m)) > 2]
        if len(culprits) == 1 and ranged:
            return _bisect_range(moves_, culprits[0], steps(culprits[0]), search)
        # a second look: the set must show the change again
        if search.look(Config(frozenset(culprits)), again=True) != Look.AFTER:
            if len(culprits) == len(probeable) and len(probeable) > 1 and _never_after(search):
                return Explanation("nowhere", moves_, probes=tuple(search.probes))
            return Explanation(
                "flaky", moves_, culprits, probes=tuple(search.probes), why="the culprit did not show the change a second time"
            )
        return Explanation("culprit" if len(culprits) == 1 else "set", moves_, culprits, probes=tuple(search.probes))
    except _BudgetSpent as spent:
        return Explanation("budget", moves_, probes=tuple(search.probes), left=str(spent) or "; ".join(m.describe() for m in probeable))
    except Inconclusive as flaky:
        return Explanation("flaky", moves_, probes=tuple(search.probes), why=str(flaky))


def _never_after(search: _Search) -> bool:
    return all(p.look != Look.AFTER for p in search.probes)


def _ddmin(changes: Sequence[Move], search: _Search) -> list[Move] | None:
    """The smallest set of `changes` that, applied to the night before, shows the change
    (1-minimal: leaving out any one of them does not). A few are tried one at a time first.
    None where no set short of all of them shows it and all of them, tried last, do not either."""
    c = list(changes)

    def fails(subset: Sequence[Move]) -> bool:
        search.left = "; ".join(m.describe() for m in c)
        return search.look(Config(frozenset(subset))) == Look.AFTER

    if len(c) <= 3:
        alone = [m for m in c if fails([m])]
        if alone:
            return [alone[0]]
    n = 2
    while len(c) >= 2:
        chunks = _split(c, n)
        reduced = next((chunk for chunk in chunks if len(chunk) < len(c) and fails(chunk)), None)
        if reduced is not None:
            c, n = reduced, 2
            continue
        if n > 2:
            complement = next((rest for chunk in chunks if (rest := [m for m in c if m not in chunk]) and fails(rest)), None)
            if complement is not None:
                c, n = complement, max(n - 1, 2)
                continue
        if n >= len(c):
            break
        n = min(len(c), 2 * n)
    if len(c) == len(changes) and len(changes) > 1 and not fails(c):
        return None  # not even all of them
    return c


def _split(items: Sequence[Move], n: int) -> list[list[Move]]:
    size = math.ceil(len(items) / n)
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def _bisect_range(moves_: tuple[Move, ...], move: Move, steps: Sequence[Step], search: _Search) -> Explanation:
    """The first commit of `move`'s range (the night before's end first) that shows the change;
    the range's ends are known from the two nights and not probed again. Then a second look."""

    def verdict(step: Step) -> Verdict:
        search.left = f"{move.describe()}: between {window[0]} and {window[-1]}"
        look = search.look(Config(at=((move, step),)))
        return {Look.BEFORE: Verdict.GOOD, Look.AFTER: Verdict.BAD}.get(look, Verdict.SKIP)

    window = list(steps)

    class _Window:
        def probed(self, probe: Probe[Step], remaining: int) -> None:
            nonlocal window
            at = window.index(probe.candidate) if probe.candidate in window else -1
            if at > 0 and probe.verdict == Verdict.GOOD:
                window = window[at:]
            elif at > 0 and probe.verdict == Verdict.BAD:
                window = window[: at + 1]

    found = bisect(list(steps), verdict, verify_ends=False, handler=_Window())
    culprit = found.first_bad
    second = search.look(Config(at=((move, culprit),)), again=True)  # a second look before it is named
    if second != Look.AFTER:
        why = f"{culprit} did not show the change a second time ({second.value})"
        return Explanation("flaky", moves_, (move,), probes=tuple(search.probes), why=why)
    return Explanation("culprit", moves_, (move,), culprit, found.last_good, tuple(found.undecided), probes=tuple(search.probes))


def parse_budget(text: str) -> tuple[int, float]:
    """`--budget`: a number of probes (`20`), or minutes (`30m`): (probes, seconds), the other unbounded.

    >>> parse_budget("20"), parse_budget("30m")
    ((20, 0.0), (0, 1800.0))
    """
    found = re.fullmatch(r"\s*(\d+)\s*(m|min|minutes)?\s*", text)
    if not found or int(found.group(1)) <= 0:
        raise ValueError(f"--budget {text!r}: give a number of probes (20) or of minutes (30m)")
    value = int(found.group(1))
    return (0, value * 60.0) if found.group(2) else (value, 0.0)


def commit_link(url: str, sha: str) -> str:
    """A commit's page on GitHub, GitLab or Hugging Face from its repository's URL (a git axis's
    `git+https://…@ref`, or a clone's `origin`); "" for a forge the harness does not know.

    >>> commit_link("git+https://github.com/huggingface/accelerate@main", "abc123")
    'https://github.com/huggingface/accelerate/commit/abc123'
    >>> commit_link("git@github.com:team/repo.git", "abc123"), commit_link("file:///tmp/repo", "abc123")
    ('https://github.com/team/repo/commit/abc123', '')
    """
    bare = url.removeprefix("git+")
    head, _, ref = bare.rpartition("@")
    if head and "/" not in ref and "://" in head:  # a ref after the path (`…/accelerate@main`), not a user (`git@host:`)
        bare = head
    found = re.match(r"(?:https?://|ssh://git@|git@)(github\.com|gitlab\.com|huggingface\.co)[:/](.+?)(?:\.git)?/?$", bare)
    if not found or not sha:
        return ""
    host, path = found.groups()
    return f"https://{host}/{path}/commit/{sha}" if host != "gitlab.com" else f"https://{host}/{path}/-/commit/{sha}"


def with_commits(move: Move, count: int) -> Move:
    return replace(move, commits=count)
