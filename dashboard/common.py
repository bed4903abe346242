"""What every page shares: which results file, cached read-only queries, the data banner, filters.

Connections (`HARNESS_DASHBOARD_CONNECTION`): `held`, the default, keeps one read-only
connection per file while the dashboard is in use and closes it after IDLE_SECONDS without a
query, so DuckDB's cache stays warm across clicks; `per-query` opens and closes the file around
every query (each open starts DuckDB cold); `cached` keeps its connection for the server's
life. None of them stands in a sweep's way: a sweep never writes the file in place (it folds
its journal into a copy and swaps it in, harness/storage/store.py), so a reader's lock is no obstacle.
A held connection is a snapshot of the file and its journals, so it is opened again when they
change. Query results are cached per file version (path, size and mtime of the file, its WAL
and its journals): a file a sweep changed is read again. While a sweep writes to the file,
every page says how far it got; every page reruns itself when the version changes (REFRESH_SECONDS).
docs/dashboard.md has the measurements.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
from collections.abc import Callable, Sequence, Sized
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import pandas as pd
import streamlit as st

from dashboard import logic
from harness.analysis import heatmap
from harness.errors import StoreLocked
from harness.inputs import bundled
from harness.running import live
from harness.storage import attributed, journal, pages, queries
from harness.storage.store import Store

P = ParamSpec("P")
R = TypeVar("R")
#: A read of a results file: `queries.<function>`, or any function whose first argument is the Store.
Read = Callable[Concatenate[Store, P], R]

#: The sample shipped in a checkout; an installed harness has none and reads the project's own file.
SAMPLE_DB = bundled.sample_db()
DEFAULT_DB = SAMPLE_DB or Path("results") / "compat.duckdb"
#: What the shipped file is, shown whenever it is the one on screen.
DEFAULT_DESCRIPTION = "the sample shipped with the harness: the default CPU sweep of matrix.toml, run for real"
CONNECTION = os.environ.get("HARNESS_DASHBOARD_CONNECTION", "held")
#: `held` connections close after this many seconds without a query.
IDLE_SECONDS = 10.0
#: A query waits this long for a process outside the harness that opened the file for writing.
LOCK_WAIT = 5.0
#: While a sweep writes to the file, each page checks this often whether new outcomes arrived.
REFRESH_SECONDS = 2.0
#: What `query` results are cached by: the file, its WAL and its journals, each with size and mtime.
FileVersion = tuple[Any, ...]
PAGES = {
    "matrix": "views/matrix.py",
    "failures": "views/failures.py",
    "history": "views/history.py",
    "cell": "views/cell.py",
    "compare": "views/compare.py",
    "pin": "views/pin.py",
    "support": "views/support.py",
}


def given_db() -> Path:
    """`streamlit run dashboard/app.py -- --db FILE`, else $HARNESS_DASHBOARD_DB, else the shipped file."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--db", type=Path, default=None)
    args, _ = parser.parse_known_args(sys.argv[1:])
    if args.db is not None:
        return Path(args.db)
    if os.environ.get("HARNESS_DASHBOARD_DB"):
        return Path(os.environ["HARNESS_DASHBOARD_DB"])
    return DEFAULT_DB


def db_choices() -> list[Path]:
    """The given file first, then the other results files beside it, in the current directory's
    results/ and beside the shipped sample."""
    given = given_db()
    folders = {f.resolve() for f in (given.parent, Path("results"), DEFAULT_DB.parent) if f.is_dir()}
    others = {p.resolve() for folder in folders for p in folder.glob("*.duckdb")} - {given.resolve()}
    return [given, *sorted(others)]


def db_path() -> Path:
    chosen = st.session_state.get("db_choice")
    return Path(chosen) if chosen else given_db()


def file_version(path: Path) -> FileVersion:
    """Changes whenever a sweep writes to the file or to a journal beside it, so cached results are never stale."""
    try:
        main = path.stat()
    except FileNotFoundError:
        return (str(path), 0, 0, 0, 0, ())
    wal = Path(f"{path}.wal")
    extra = wal.stat() if wal.exists() else None
    journals = []
    for found in journal.journals(path):
        try:
            stat = found.stat()
        except FileNotFoundError:
            continue  # folded and removed just now
        journals.append((found.name, stat.st_mtime_ns, stat.st_size))
    return (
        str(path.resolve()),
        main.st_mtime_ns,
        main.st_size,
        extra.st_mtime_ns if extra else 0,
        extra.st_size if extra else 0,
        tuple(journals),
    )


class _Held:
    """One read-only connection per file, shared by every session, closed when idle (`held`) or
    never (`cached`), and opened again when the file changes (a held connection is a snapshot)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # one DuckDB connection is not safe across Streamlit's session threads
        self.stores: dict[str, tuple[Store, FileVersion]] = {}
        self.timers: dict[str, threading.Timer] = {}

    def call(
        self, version: FileVersion, read: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], idle: float | None
    ) -> Any:
        path = version[0]
        with self.lock:
            held = self.stores.get(path)
            if held is not None and held[1] != version:
                self._drop(path)
                held = None
            if held is None:
                store = Store(path, read_only=True, lock_wait=LOCK_WAIT)
                store.con  # noqa: B018 - opens and pins the connection: one snapshot while in use
                held = self.stores[path] = (store, version)
            try:
                return read(held[0], *args, **kwargs)
            finally:
                if path in self.timers:
                    self.timers.pop(path).cancel()
                if idle is not None:
                    timer = self.timers[path] = threading.Timer(idle, self.close, [path])
                    timer.daemon = True
                    timer.start()

    def _drop(self, path: str) -> None:
        held = self.stores.pop(path, None)
        timer = self.timers.pop(path, None)
        if timer is not None:
            timer.cancel()
        if held is not None:
            held[0].close()

    def close(self, path: str) -> None:
        with self.lock:
            self._drop(path)

    def close_all(self) -> None:
        for path in list(self.stores):
            self.close(path)


_held = _Held()
atexit.register(_held.close_all)  # a connection left to the interpreter's teardown makes DuckDB complain


def _call(version: FileVersion, read: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if CONNECTION == "per-query":
        with Store(version[0], read_only=True, lock_wait=LOCK_WAIT) as store, store.reading():
            return read(store, *args, **kwargs)  # one connection (one view) for all the read's queries
    return _held.call(version, read, args, kwargs, None if CONNECTION == "cached" else IDLE_SECONDS)


@st.cache_data(show_spinner=False, max_entries=256)
def _cached(
    version: FileVersion, name: str, _read: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], _aside: bool = False
) -> Any:
    # `name` keys the cache; `_read` and `_aside` (not hashed: a leading underscore) are the function
    # itself and whether it reads on a connection of its own (`query_aside`).
    if _aside:
        with Store(version[0], read_only=True, lock_wait=LOCK_WAIT) as store, store.reading():
            return _read(store, *args, **kwargs)
    return _call(version, _read, args, kwargs)


def query_aside(read: Read[P, R], *args: P.args, **kwargs: P.kwargs) -> None:
    """Start `query(read, *args, **kwargs)` now, in a thread, on a connection of its own: a `query` of
    the same read later in the run finds it cached, or waits for it (Streamlit computes a cached
    value once). DuckDB lets go of the GIL while it works, so the read goes on beside the page's own
    reads (its connection takes one at a time) and costs the script no time of its own: the Matrix's
    banner counts (`queries.overview`, a scan of every node id) are read while the files are tallied,
    and the script ends when the page is drawn, not a scan later. An error is left for that later
    `query`, which reads again and says why."""
    from streamlit.runtime.scriptrunner import add_script_run_ctx, get_script_run_ctx

    name = f"{read.__module__}.{read.__qualname__}"
    version = file_version(db_path())

    def run() -> None:
        try:
            _cached(version, name, read, args, kwargs, _aside=True)
        except Exception:  # the page's own `query` of it reads again and reports it
            pass

    thread = threading.Thread(target=run, name=f"query_aside {name}", daemon=True)
    add_script_run_ctx(thread, get_script_run_ctx())  # st.cache_data asks for the session's context
    thread.start()


def query(read: Read[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`read(Store(db, read_only=True), *args, **kwargs)`, cached until the file changes.

    `read` is a function object (`pages.facets`, `pinning.pin_from_store`), not a name: a
    renamed read breaks at import and under mypy, not while a page is drawn.
    """
    name = f"{read.__module__}.{read.__qualname__}"
    return _cached(file_version(db_path()), name, read, args, kwargs)


def read(read: Read[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`query` without its cache: for rows the caller caches only in the shape it makes of them
    (`suite._grid` keeps a grid, not the 20,000 rows it was built from: their pickle cost every miss)."""
    return _call(version(), read, args, kwargs)


def version() -> FileVersion:
    return file_version(db_path())


# -- the frame of every page ------------------------------------------------------------------
def data_banner() -> dict[str, Any]:
    """Say which data is on screen and, while a sweep writes it, how far the sweep got (and
    follow it); stop with the reason when the file cannot be read."""
    return data_banner_later()()


def data_banner_later() -> Callable[[], dict[str, Any]]:
    """`data_banner` in two steps. Now: the checks that stop the page (the file cannot be read, or
    holds no outcomes: a count DuckDB keeps, no scan), the banner's line with its counts still to
    come, and the sweeps' progress. Then the returned `fill`, called when the page has drawn what it
    needs, writes the counts (`queries.overview`: at 2,000,000 outcomes its count of node ids scans
    every one, 0.1-0.4 s) into the same line; they are read meanwhile, on a connection of their own
    (`query_aside`), while the page's reads go on and the browser draws. Returns the overview."""
    path = db_path()
    # First, and always: a page that stops below (no outcomes yet) still notices a sweep that
    # starts writing later. On a file no one writes, it is a stat every REFRESH_SECONDS.
    _follow(version())
    writers = live.writers(path)
    outcomes = _readable(path, queries.row_count)
    shown = _display(path)
    what = f"**{shown}** — {DEFAULT_DESCRIPTION}" if SAMPLE_DB and path.resolve() == SAMPLE_DB.resolve() else f"**{shown}**"
    line = st.empty()
    line.caption(f"Data: {what} · {outcomes:,} outcomes · …")  # one line now and filled: nothing below it moves

    def fill() -> dict[str, Any]:
        overview = _readable(path, queries.overview)
        span = ""
        if overview["first"] is not None:
            first, last = str(overview["first"])[:10], str(overview["last"])[:10]
            span = f" · {first}" if first == last else f" · {first} … {last}"
        hosts = ", ".join(overview["gpus"]) or "no host recorded"
        line.caption(
            f"Data: {what} · {overview['outcomes']:,} outcomes · {overview['runs']} run(s) · {overview['cells']} cell(s) · "
            f"{overview['scenarios']} scenario(s) · {hosts}{span} · {overview['transitions']:,} stored transition(s)"
        )
        return dict(overview)

    if outcomes:
        query_aside(queries.overview)  # `fill` finds it read, or waits for it
    for writer in writers:
        _progress(writer)
    if outcomes == 0:
        fill()
        st.info(f"{shown} holds no outcomes yet: run `harness sweep --db {shown}`.")
        st.stop()
    return fill


def _readable(path: Path, read: Read[[], R]) -> R:
    """`query(read)`, or the page stopped with why the file cannot be read."""
    try:
        return query(read)
    except StoreLocked as exc:  # a process outside the harness holds the file open for writing
        st.error(f"Cannot read {path}: {exc}")
        st.stop()
    except Exception as exc:  # StoreError (no such file, not DuckDB)
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        st.error(f"Cannot read {path}: {first}")
        st.stop()


@st.fragment(run_every=REFRESH_SECONDS)
def _follow(seen: FileVersion) -> None:
    """Rerun the whole page when the file or its journals changed (a sweep wrote an outcome, a
    merge or `attribute` swapped the file in): a fragment, so between two checks nothing is redrawn."""
    if version() != seen:
        st.rerun()


def _progress(writer: live.Writer) -> None:
    """One line per sweep writing to the file: done, running, left (or: stopped, rerun to resume)."""
    if not writer.run_id or not (writer.alive or writer.stopped):
        return
    done = query(queries.outcome_count, writer.run_id)
    who = f"run `{writer.run_id}`, PID {writer.pid} on {writer.host}"
    if writer.alive:
        now = "; ".join(f"`{c}` · `{s}`" + (f" (repeat {r})" if r else "") for c, s, r, _ in writer.running[:3])
        more = f" and {len(writer.running) - 3} more" if len(writer.running) > 3 else ""
        st.info(
            f"**Live:** a sweep is writing to this file ({who}): **{done:,} done · {len(writer.running)} running · "
            f"{writer.left:,} left**" + (f"; running now: {now}{more}" if now else "") + ". This page follows it as outcomes arrive.",
            icon=":material/sync:",
        )
    else:
        st.warning(
            f"A sweep that wrote to this file stopped before it finished ({who}, last heard {writer.updated_at} UTC): "
            f"{done:,} done, {writer.left + len(writer.running):,} left. Run the same `harness sweep` again to resume it.",
            icon=":material/pause_circle:",
        )


def _display(path: Path) -> str:
    """Relative to the current directory (a checkout or the user's project) where it lies under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def source_picker() -> None:
    """The sidebar's choice of results file (the given one, or another under results/)."""
    choices = [str(p) for p in db_choices()]
    if st.session_state.get("db_choice") not in choices:
        st.session_state["db_choice"] = choices[0]
    st.sidebar.selectbox("Results file", choices, key="db_choice", format_func=lambda p: _display(Path(p)))


def keep(key: str, default: Any) -> None:
    """Give widget `key` its last value when a page comes back (Streamlit forgets widgets that
    were not drawn in the previous run; the value is kept under a key of our own)."""
    if key not in st.session_state:
        st.session_state[key] = st.session_state.get(f"kept:{key}", default)


def remember(key: str) -> None:
    st.session_state[f"kept:{key}"] = st.session_state.get(key)


def multiselect(
    label: str, options: Sequence[str], key: str, *, where: Any = None, help: str | None = None, placeholder: str = "any"
) -> list[str]:
    keep(key, [])
    st.session_state[key] = [v for v in st.session_state[key] if v in options]
    value = (where or st).multiselect(label, list(options), key=key, help=help, placeholder=placeholder)
    remember(key)
    return list(value)


def picked_row(event: Any, rows: Sized) -> int | None:
    """The index of the first row selected in an st.dataframe (`event`, what it returns with
    on_select="rerun") that lies within `rows` (its table, or the list it was drawn from), else None.

    Every table of the dashboard that opens something on a click reads its selection this one way.
    A selection is kept under the table's key across reruns, so after the data under it changed
    (a sweep added outcomes, a filter narrowed the list) it can name a row the table no longer
    has: that counts as nothing selected, never an IndexError.
    """
    for i in event.selection.rows:
        if 0 <= int(i) < len(rows):
            return int(i)
    return None


def picked_text(event: Any, frame: pd.DataFrame, column: str, default: str | None = None) -> str | None:
    """`column` of the row picked in `frame` (picked_row) as text, else `default`. With no default,
    None says nothing was selected (a value made text is never None)."""
    index = picked_row(event, frame)
    return default if index is None else str(frame.iloc[index][column])


def filters(facets: dict[str, list[str]], *, scenario: bool = True) -> dict[str, list[str]]:
    """Sidebar filters shared by Matrix and Failures: runs, scenarios, GPU, platform, each axis.

    A facet with a single value in the whole file narrows nothing: it gets no widget (each
    select costs the browser tens of milliseconds to draw, and a suite's file often holds one
    torch, one GPU and one run)."""
    axes = logic.axis_order(a for a in facets if a not in ("scenario", "run_id", "platform", "gpu"))
    offered: list[tuple[str, str, list[str], str, str | None]] = [(a, a, logic.sort_values(facets[a]), f"f_{a}", None) for a in axes]
    if scenario:
        offered.append(("scenario", "scenario", facets["scenario"], "f_scenario", None))
    offered += [
        ("gpu", "GPU", facets["gpu"], "f_gpu", "`cpu` for runs on machines without a GPU"),
        ("platform", "platform", facets["platform"], "f_platform", None),
        ("run_id", "run", facets["run_id"], "f_run", "a sweep, a shard or a bisection (`harness bisect` stores its probes as a run)"),
    ]
    offered = [o for o in offered if len(o[2]) > 1]
    if offered:
        st.sidebar.markdown("**Filters** (empty: any)")
    chosen = {name: multiselect(label, values, key, where=st.sidebar, help=help) for name, label, values, key, help in offered}
    return {k: v for k, v in chosen.items() if v}


def open_cell(cell_id: str, scenario: str = "") -> None:
    params = {"cell": cell_id, **({"scenario": scenario} if scenario else {})}
    st.switch_page(PAGES["cell"], query_params=params)


def select_kept(label: str, options: Sequence[str], key: str, default: str, *, help: str | None = None) -> str:
    """A selectbox whose choice is kept across pages, falling back to `default` when the kept one is no option here."""
    keep(key, default)
    if st.session_state[key] not in options:
        st.session_state[key] = default if default in options else (options[0] if options else "")
    if not options:
        return ""
    value = st.selectbox(label, list(options), key=key, help=help)
    remember(key)
    return str(value)


def select_edge_axis(axes: Sequence[str], edges: Sequence[tuple[heatmap.Edge, int]]) -> str:
    """The heatmap's library whose releases vary fastest (a release that changes an outcome then sits
    beside the one before it); kept across pages, the library most answers are about by default
    (`edges`: each with how many transitions give it, `edges_if_cheap`)."""
    return select_kept(
        "Changes along this library show as edges",
        axes,
        "m_last",
        heatmap.busiest_of(_by_axis(edges), axes),
        help="The cells are ordered by every library's version, this one varying fastest: a release of it that changes an "
        "outcome sits right beside the release before it. The default is the library most answers are about.",
    )


def _by_axis(edges: Sequence[tuple[heatmap.Edge, int]]) -> dict[str, int]:
    """How many transitions are along each axis: each edge's count added, not the edge repeated that often."""
    counts: dict[str, int] = {}
    for edge, n in edges:
        counts[edge.axis] = counts.get(edge.axis, 0) + n
    return counts


#: Past this many outcomes, answers that `harness attribute` did not store are not computed for the heatmap's marks:
#: a 20,000-test suite takes tens of seconds to answer, and the Matrix page must come up in under 2 s.
CHEAP_ANSWERS = 20_000


def _file_of(test: str) -> str:
    return test.split("::", 1)[0]


def edges_if_cheap(store: Store, by_file: bool = False) -> list[tuple[heatmap.Edge, int]]:
    """The heatmap's edges (`heatmap.edges_of` of every transition of the file, each row a scenario or,
    `by_file`, a test file), each once with how many transitions give it: grouped in DuckDB from the
    answers `harness attribute` stored while they are current (`pages.heatmap_edges`), computed
    when the file is small; else none."""
    if attributed.answers_current(store):
        return [
            (heatmap.Edge(r["row"], r["kind"], r["headline"], r["axis"], r["before_cell"], r["after_cell"], r["signature"]), int(r["n"]))
            for r in pages.heatmap_edges(store, by_file=by_file)
        ]
    if queries.overview(store)["outcomes"] <= CHEAP_ANSWERS:
        from harness.workflows import answering as answer

        return [(e, 1) for e in heatmap.edges_of(answer.failure_answers(store).transitions, _file_of if by_file else None)]
    return []


class Answers:
    """The Failures page's answers (`answering.FailureAnswers`' `summary`, `stored` and `of`), read
    as the page needs them. While the answers `harness attribute` stored are current, the summary
    is their groups (`attributed.transition_answer_groups`: one row per distinct answer) and a
    signature's transitions are read when it is shown (`attributed.transitions` of it): never all
    78,000 transitions of a 100,000-test suite decoded and cached at once (2.7 s). Otherwise
    `answering.failure_answers` computes them all, as before."""

    def __init__(self) -> None:
        self.stored = bool(query(attributed.answers_current))
        self.summary: list[dict[str, Any]]
        if self.stored:
            self.summary = query(attributed.transition_answer_groups, "")
        else:
            self.summary = query(_computed_answers).summary

    def of(self, signature: str) -> list[dict[str, Any]]:
        """One signature's transitions, machine differences and flaky cells, by scenario in attribution's order."""
        if not self.stored:
            return query(_computed_answers).of(signature)
        return sorted(query(attributed.transitions, "", signature), key=lambda t: t["scenario"])


def _computed_answers(store: Store) -> Any:
    from harness.workflows import answering as answer

    return answer.failure_answers(store)


def failure_answers() -> Answers:
    return Answers()
