"""Refinement: which cells to build next so that every range between two tested releases becomes exact. Pure.

A range (`Transition` with releases `not_built` between its ends) is refined on its own line:
the same machine, the same other axes, the axis set to a release in between. `search` runs the
rounds: each round it asks its `answers` seam for the transitions the stored outcomes give now,
names the probe cells (`plan_round`), and hands them to its `build` seam, which (in the driver,
`harness.workflows.refining`) builds and runs them as ordinary cells and stores their outcomes; then the
next round, until no range is left that a build could narrow, or the limit of probe cells is
reached. The search never builds, runs or prints (as `analysis.bisect`'s does not).

How probes are chosen and shared:
- **Bisection per range.** A range's next probe is the middle of its releases not built, so a
  range of k such releases takes about ⌈log2(k+1)⌉ probes.
- **One cell, every range it spans.** A probe cell runs every scenario whose open range on
  its line contains the probe's release: two failures fixed somewhere in the same span share
  their first probes.
- **Lines that share a transition share what one of them learned.** The same failure fixed
  between the same two releases on several lines (other axes held at other versions) is first
  refined on one line, the leader; the others wait. Once the leader's answer is exact, each other
  line probes the leader's boundary first (its release, then the one before it): where the
  failure behaves the same there, two builds make that line exact too, instead of a whole
  bisection. Where it does not, that line is bisected on its own. With `share="first"` only
  the leader is refined and the other lines keep their ranges (cheapest; they say so).

>>> from harness.analysis.attribution import Transition
>>> t = Transition("s", "sig", "accelerate", "fixed", "1.13.0", "1.16.0", (("torch", "2.13.0"),), "cpu",
...                not_built=("1.14.0", "1.14.1", "1.15.0"), before_cell="a", after_cell="b")
>>> [(p.value, p.scenarios) for p in next_probes([t], "cpu")]
[('1.14.1', ('s',))]
>>> found = search(lambda: ([t], ["cpu"]), lambda probes: 0)  # a build whose outcomes never land on the line
>>> found.rounds, [p.value for p in found.probes], found.stopped
(1, ['1.14.1'], 'a probe (accelerate 1.14.1) did not narrow its range: its cell ran on another machine class')
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from harness.analysis.attribution import UNLISTED, Transition
from harness.analysis.versions import release, version_key

Share = Literal["all", "first"]


@dataclass(frozen=True, order=True)
class Line:
    """Where a probe is built: one machine class, one axis, the other axes held at these values."""

    machine: str
    axis: str
    held: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Probe:
    """One cell to build: `line` with its axis at `value`, running `scenarios`.

    `base_cell` is a cell id on the line (its other candidates are the probe's); `why` says
    how the value was chosen (`middle of 5 not built`, `the boundary found on another line`).
    """

    line: Line
    value: str
    scenarios: tuple[str, ...]
    base_cell: str
    why: str = ""


@dataclass(frozen=True)
class _Open:
    """A range a build can narrow: its transition and the releases between its ends that were not built."""

    transition: Transition
    candidates: tuple[str, ...]  # oldest first

    @property
    def line(self) -> Line:
        t = self.transition
        return Line(t.machine, t.axis, t.held)

    @property
    def family(self) -> tuple[str, str, str, str]:
        """Ranges of one failure along one axis on several lines of the matrix: they share what one learns."""
        t = self.transition
        return (t.scenario, t.signature, t.axis, t.kind)


@dataclass
class Plan:
    """The probes of one round, and the ranges that wait for another line's answer (for the log)."""

    probes: list[Probe] = field(default_factory=list)
    waiting: int = 0
    kept: int = 0  # ranges left as ranges by `share="first"`


#: Whether a release of an axis can be built here: an offline runner can build only what its
#: wheelhouse holds. (axis, release) -> bool.
Buildable = Callable[[str, str], bool]


def open_ranges(transitions: Iterable[Transition], machine: str, buildable: Buildable | None = None) -> list[_Open]:
    """Ranges on `machine` between two releases with releases not built between them: what a build can narrow.

    A range that is only inconclusive (every release between was built and said nothing), or
    whose ends are not both releases, or whose axis' index list was not known, is left alone.
    With `buildable`, only the releases it allows are candidates; the others stay "not built"
    in the answer, which then remains a range naming them.
    """
    found = []
    for t in transitions:
        if t.machine != machine or release(t.before) is None or release(t.after) is None:
            continue
        listed = (v for v in t.not_built if v != UNLISTED and release(v) is not None and (buildable is None or buildable(t.axis, v)))
        candidates = tuple(sorted(listed, key=version_key))
        if candidates:
            found.append(_Open(t, candidates))
    return found


def _boundaries(transitions: Iterable[Transition], machine: str) -> dict[tuple[str, str, str, str], list[tuple[str, str]]]:
    """family -> (release before, release of the change) of every exact answer on this machine."""
    known: dict[tuple[str, str, str, str], list[tuple[str, str]]] = defaultdict(list)
    for t in transitions:
        if t.machine == machine and t.exact and release(t.before) is not None and release(t.after) is not None:
            known[(t.scenario, t.signature, t.axis, t.kind)].append((t.before, t.after))
    return known


def _middle(candidates: Sequence[str]) -> str:
    """The release a bisection probes next: the middle one (of an even count, the later middle)."""
    return candidates[len(candidates) // 2]


def next_probes(transitions: Sequence[Transition], machine: str, share: Share = "all") -> list[Probe]:
    """The cells to build next on `machine`; [] when no range left can be narrowed by a build."""
    return plan_round(transitions, machine, share).probes


def plan_round(transitions: Sequence[Transition], machine: str, share: Share = "all", buildable: Buildable | None = None) -> Plan:
    ranges = open_ranges(transitions, machine, buildable)
    boundaries = _boundaries(transitions, machine)
    # The family's first line in matrix order (over its answers, open or exact) is the one
    # `share="first"` refines; the first *open* range is the leader that bisects for the others.
    first_line: dict[tuple[str, str, str, str], Line] = {}
    for t in transitions:
        if t.machine == machine:
            first_line.setdefault((t.scenario, t.signature, t.axis, t.kind), Line(t.machine, t.axis, t.held))
    leaders: dict[tuple[str, str, str, str], _Open] = {}
    for r in ranges:
        leaders.setdefault(r.family, r)
    plan = Plan()
    chosen: dict[tuple[Line, str], tuple[str, str]] = {}  # (line, value) -> (base cell, why)
    for r in ranges:
        if share == "first" and r.line != first_line.get(r.family):
            plan.kept += 1
            continue
        exact = boundaries.get(r.family, [])
        value, why = _choose(r, exact)
        if not value:
            if leaders[r.family] is not r and not exact:
                plan.waiting += 1  # until the leader's answer is exact: then its boundary is tried here first
                continue
            value, why = _middle(r.candidates), f"middle of {len(r.candidates)} not built"
        chosen.setdefault((r.line, value), (r.transition.before_cell, why))
    for (line, value), (base, why) in sorted(chosen.items(), key=lambda item: (item[0][0], version_key(item[0][1]))):
        # Every scenario whose open range on this line spans the value runs in the probe cell.
        scenarios = sorted({r.transition.scenario for r in ranges if r.line == line and value in r.candidates})
        plan.probes.append(Probe(line, value, tuple(scenarios), base, why))
    return plan


def _choose(r: _Open, exact: Sequence[tuple[str, str]]) -> tuple[str, str]:
    """The boundary another line found, if it lies in this range: its release first, then the one before."""
    for before, after in exact:
        if after in r.candidates:
            return after, f"the boundary found on another line ({after} after {before})"
        if before in r.candidates:
            return before, f"the boundary found on another line ({before} before {after})"
    return "", ""


def probes_needed(k: int) -> int:
    """⌈log2(k+1)⌉: what a bisection of k releases not built costs in builds (the benchmark's yardstick)."""
    return (k).bit_length()


def reachable(candidates: Sequence[str], rounds: int) -> list[str]:
    """Every release a bisection of `candidates` may probe within `rounds` rounds, whichever way each probe goes.

    What an offline runner needs wheels for, prepared where the index is reachable: the
    middle, then the middles of both halves, and so on (2**rounds - 1 releases at most).

    >>> reachable(["a", "b", "c", "d", "e", "f", "g"], 2)
    ['b', 'd', 'f']
    """
    if rounds <= 0 or not candidates:
        return []
    mid = len(candidates) // 2
    picked = {candidates[mid], *reachable(candidates[:mid], rounds - 1), *reachable(candidates[mid + 1 :], rounds - 1)}
    return [c for c in candidates if c in picked]


def levels(candidates: Sequence[str]) -> list[list[str]]:
    """The releases between two listed ones by bisection depth: what a first round may probe,
    then what a second may add, and so on. An offline runner's wheelhouse takes them in this
    order until its size budget is spent, so a smaller budget still narrows every range.

    >>> levels(["a", "b", "c", "d", "e", "f", "g"])
    [['d'], ['b', 'f'], ['a', 'c', 'e', 'g']]
    """
    found: list[list[str]] = []
    seen: set[str] = set()
    for depth in range(1, probes_needed(len(candidates)) + 1):
        new = [c for c in reachable(candidates, depth) if c not in seen]
        seen.update(new)
        found.append(new)
    return found


def offline_probes(transitions: Sequence[Transition], machine: str, rounds: int) -> list[Probe]:
    """The probe cells of the next `rounds` rounds on every line, for an offline runner to run in one go."""
    ranges = open_ranges(transitions, machine)
    found: dict[tuple[Line, str], tuple[set[str], str]] = {}
    for r in ranges:
        for value in reachable(r.candidates, rounds):
            scenarios, _ = found.setdefault((r.line, value), (set(), r.transition.before_cell))
            scenarios.add(r.transition.scenario)
    return [
        Probe(line, value, tuple(sorted(scenarios)), base, f"within {rounds} round(s) of bisection")
        for (line, value), (scenarios, base) in sorted(found.items(), key=lambda item: (item[0][0], version_key(item[0][1])))
    ]


# -- the search ----------------------------------------------------------------------------------
#: A round of probes, as it starts: (round number, the plan) -> the caller's log line(s).
OnRound = Callable[[int, Plan], None]
#: The search's seams. `Answers`: the transitions the stored outcomes give now, and the machine
#: classes to refine on. `Build`: build and run a round's probe cells and store their outcomes;
#: returns how many environments it built (not reused).
Answers = Callable[[], tuple[Sequence[Transition], Sequence[str]]]
Build = Callable[[Sequence[Probe]], int]
#: A safety net: every round builds at least one new (line, release), and lines are finite.
MAX_ROUNDS = 100


@dataclass
class RefineReport:
    """What refinement built, and why it stopped."""

    rounds: int = 0
    probes: list[Probe] = field(default_factory=list)
    envs_built: int = 0  # probe cells whose env was built (not reused)
    stopped: str = ""  # "" (nothing left to narrow), or why it stopped early

    def line(self) -> str:
        if not self.probes:
            return "refinement: no range between tested releases to narrow" + (f" ({self.stopped})" if self.stopped else "")
        lines = {(p.line.axis, p.line.held) for p in self.probes}
        text = f"refinement: {len(self.probes)} probe cell(s) on {len(lines)} line(s) in {self.rounds} round(s)"
        text += f", {self.envs_built} env(s) built"
        return text + (f"; stopped: {self.stopped}" if self.stopped else "")


def search(
    answers: Answers,
    build: Build,
    *,
    share: Share = "all",
    limit: int = 0,
    buildable: Buildable | None = None,
    on_round: OnRound | None = None,
) -> RefineReport:
    """Round after round, the probes that narrow the open ranges on each machine `answers` names,
    built through `build`, until none is left, a probe would be built twice, or `limit` probe
    cells (0: no limit) are built."""
    report = RefineReport()
    tried: set[tuple[str, str, tuple[tuple[str, str], ...], str]] = set()
    for number in range(1, MAX_ROUNDS + 1):
        transitions, machines = answers()
        plans = [plan_round(transitions, machine, share, buildable) for machine in machines]
        plan = Plan([p for pl in plans for p in pl.probes], sum(pl.waiting for pl in plans), sum(pl.kept for pl in plans))
        again = [p for p in plan.probes if (p.line.machine, p.line.axis, p.line.held, p.value) in tried]
        if again:
            # Its outcomes did not land on its line: they ran on another machine class (another
            # torch build, say). Building it once more would change nothing.
            report.stopped = (
                f"a probe ({again[0].line.axis} {again[0].value}) did not narrow its range: its cell ran on another machine class"
            )
            break
        if not plan.probes:
            break
        if limit and len(report.probes) + len(plan.probes) > limit:
            plan.probes = plan.probes[: max(0, limit - len(report.probes))]
            report.stopped = f"refine_limit of {limit} probe cell(s) reached"
            if not plan.probes:
                break
        report.rounds = number
        if on_round:
            on_round(number, plan)
        tried.update((p.line.machine, p.line.axis, p.line.held, p.value) for p in plan.probes)
        report.envs_built += build(plan.probes)
        report.probes += plan.probes
        if report.stopped:
            break
    return report
