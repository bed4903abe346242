"""The dashboard's reads, one per thing its pages draw: the runs, the values a filter can take,
the matrix's counts per cell and scenario, the cells with their versions, the failures by
signature, and bisections' probes.

Filters (`clauses.Filters`) narrow them. Heavy lifting (grouping, counting) stays in DuckDB, so a page
over 100,000 outcomes moves thousands of rows into Python, not 100,000.
"""

from __future__ import annotations

import json
from typing import Any

from harness.analysis.rows import AXIS_ORDER
from harness.analysis.status import Status
from harness.storage import clauses
from harness.storage.clauses import Filters
from harness.storage.resultsfile import SqlResultsFile


def run_summaries(store: SqlResultsFile) -> list[dict[str, Any]]:
    """One row per run: where it ran, when (its outcomes' span), how much it holds (current and
    history rows whose newest observation it is); newest first."""
    return store.fetch(
        """
        WITH o AS (
            SELECT run_id, min(started_at) AS first, max(started_at) AS last, count(*) AS outcomes,
                   count(DISTINCT cell_id) AS cells, count(DISTINCT scenario) AS scenarios
            FROM (
                SELECT run_id, cell_id, scenario, started_at FROM outcomes
                UNION ALL SELECT run_id, cell_id, scenario, started_at FROM history WHERE status <> 'not_collected'
            ) GROUP BY run_id
        )
        SELECT r.run_id, r.host->>'platform' AS platform, r.host->>'gpu' AS gpu, r.harness_version,
               o.first, o.last, COALESCE(o.outcomes, 0) AS outcomes, COALESCE(o.cells, 0) AS cells,
               COALESCE(o.scenarios, 0) AS scenarios, starts_with(r.run_id, 'bisect-') AS bisection
        FROM runs r LEFT JOIN o USING (run_id) ORDER BY o.last DESC NULLS LAST, r.run_id
        """
    )


def facets(store: SqlResultsFile) -> dict[str, list[str]]:
    """Every value a filter can take: scenario, platform, gpu, run_id, and each axis (unsorted versions)."""
    scenarios = [r["scenario"] for r in store.fetch("SELECT DISTINCT scenario FROM outcomes ORDER BY 1")]
    return {"scenario": scenarios, **facets_without_scenarios(store)}


def facets_without_scenarios(store: SqlResultsFile) -> dict[str, list[str]]:
    """`facets` without its `scenario` list: run_id, platform, gpu and each axis. For a test suite
    that list is every node id (20,000 strings read and cached on every page) for a filter its
    pages never draw: they search node ids instead."""
    found: dict[str, list[str]] = {"run_id": [r["run_id"] for r in store.fetch("SELECT run_id FROM runs ORDER BY 1")]}
    hosts = store.fetch("SELECT DISTINCT host->>'platform' AS platform, host->>'gpu' AS gpu FROM runs")
    found["platform"] = sorted({h["platform"] for h in hosts if h["platform"]})
    found["gpu"] = sorted({h["gpu"] for h in hosts if h["gpu"]})
    rows = store.fetch(
        "SELECT axis, COALESCE(installed->>axis, versions->>axis) AS value "
        "FROM (SELECT installed, versions, unnest(json_keys(versions)) AS axis FROM cells) GROUP BY ALL ORDER BY ALL"
    )
    for row in rows:
        if row["value"] is not None:
            found.setdefault(row["axis"], []).append(row["value"])
    return found


def matrix_counts(store: SqlResultsFile, filters: Filters | None = None, *, by_gpu: bool = False) -> list[dict[str, Any]]:
    """One row per (cell, scenario[, gpu]) over the filtered outcomes: `outcomes`, a count per
    status (columns named after the statuses) and the most frequent failure signature."""
    where, params = clauses.where(filters)
    counts = ", ".join(f"count(*) FILTER (WHERE status = '{s}') AS {s}" for s in Status)
    gpu = ", COALESCE(gpu, '') AS gpu" if by_gpu else ""
    return store.fetch(
        f"SELECT cell_id, scenario{gpu}, count(*) AS outcomes, {counts}, "
        f"mode(signature) FILTER (WHERE signature <> '' AND status IN ({clauses.FAILING})) AS signature "
        f"FROM outcomes_v{where} GROUP BY ALL ORDER BY ALL",
        params,
    )


def cell_summaries(store: SqlResultsFile, filters: Filters | None = None) -> list[dict[str, Any]]:
    """One row per cell among the filtered outcomes: its axis versions (the five columns and
    `versions`, JSON decoded), runs, GPUs, outcome count and last outcome time."""
    where, params = clauses.where(filters)
    # Group the outcomes first and look the versions up once per cell: extracting them from
    # JSON for every outcome row costs several times more.
    per_cell = f"""o AS (
            SELECT cell_id, list(DISTINCT run_id ORDER BY run_id) AS runs,
                   list(DISTINCT COALESCE(gpu, '') ORDER BY COALESCE(gpu, '')) AS gpus,
                   count(*) AS outcomes, max(started_at) AS last
            FROM outcomes_v{where} GROUP BY cell_id
        )"""
    return _with_cell_versions(store, per_cell, params)


def _with_cell_versions(store: SqlResultsFile, ctes: str, params: list[Any]) -> list[dict[str, Any]]:
    """The per-cell rows of CTE `o` (cell_id, runs, gpus, outcomes, last) with each cell's axis
    versions (newest build of the cell) as columns and as `versions`, JSON decoded."""
    axes = ", ".join(f"COALESCE(c.installed->>'{a}', c.versions->>'{a}') AS {a}" for a in AXIS_ORDER)
    rows = store.fetch(
        f"""
        WITH {ctes},
        c AS (
            SELECT cell_id, arg_max(installed, built_at) AS installed, arg_max(versions, built_at) AS versions
            FROM cells GROUP BY cell_id
        )
        SELECT o.cell_id, {axes}, c.versions, o.runs, o.gpus, o.outcomes, o.last
        FROM o LEFT JOIN c USING (cell_id) ORDER BY o.cell_id
        """,
        params,
    )
    for row in rows:
        row["versions"] = json.loads(row["versions"]) if isinstance(row["versions"], str) else (row["versions"] or {})
    return rows


def grid_cells(store: SqlResultsFile, filters: Filters | None = None) -> list[dict[str, Any]]:
    """`cell_summaries`' rows (one per cell among the filtered outcomes: axis versions, `versions`
    decoded, runs, GPUs, outcome count, last outcome time), counted per run and cell first: over a
    suite's 400,000 outcomes a tenth of the work."""
    ctes, params, _, _ = clauses.admitted_pairs(filters)
    per_cell = f"""{ctes},
        o AS (
            SELECT cell_id, list(DISTINCT run_id ORDER BY run_id) AS runs,
                   list(DISTINCT COALESCE(gpu, '') ORDER BY COALESCE(gpu, '')) AS gpus,
                   sum(outcomes)::BIGINT AS outcomes, max(last) AS last
            FROM admitted GROUP BY cell_id
        )"""
    return _with_cell_versions(store, per_cell, params)


def failure_summaries(store: SqlResultsFile, filters: Filters | None = None) -> list[dict[str, Any]]:
    """One row per failure signature (failures only: not pass, not_applicable or inconclusive): the library it
    blames, how many outcomes, cells, scenarios and runs it hits, when first and last seen."""
    where, params = clauses.where(filters)
    where = (where + " AND" if where else " WHERE") + f" {clauses.NOT_A_FAILURE}"
    return store.fetch(
        f"""
        SELECT COALESCE(NULLIF(signature, ''), status) AS signature, any_value(signature_family) AS signature_family,
               mode(NULLIF(blamed_library, '')) AS blamed_library, mode(NULLIF(exception_type, '')) AS exception_type,
               list(DISTINCT status ORDER BY status) AS statuses, count(*) AS outcomes, count(DISTINCT cell_id) AS cells,
               list(DISTINCT scenario ORDER BY scenario) AS scenarios, count(DISTINCT run_id) AS runs,
               min(started_at) AS first_seen, max(started_at) AS last_seen, min(cell_id) AS example_cell
        FROM outcomes_v{where} GROUP BY 1 ORDER BY cells DESC, outcomes DESC, signature
        """,
        params,
    )


#: Every probe a bisection stored, current or since superseded by a later run of the same cell
#: (a bisection's rows are never merged into another run's span: `history._select`).
_BISECTIONS = (
    "SELECT * FROM outcomes_v WHERE starts_with(run_id, 'bisect-') "
    "UNION ALL BY NAME SELECT * EXCLUDE (first_run) FROM history_v WHERE starts_with(run_id, 'bisect-') AND status <> 'not_collected'"
)


def bisection_probes(store: SqlResultsFile) -> list[dict[str, Any]]:
    """Outcomes of `harness bisect` runs (run ids `bisect-<scenario>-<axis>`), without their long text."""
    rows = store.fetch(
        "SELECT run_id, cell_id, scenario, repeat, status, signature, blamed_library, versions, git_commits, "
        f"{', '.join(AXIS_ORDER)}, gpu, started_at FROM ({_BISECTIONS}) "
        "ORDER BY run_id, started_at, cell_id, repeat"
    )
    return clauses.decode(rows, ("versions", "git_commits"))


def bisection_probes_by_axis(store: SqlResultsFile) -> list[dict[str, Any]]:
    """`bisection_probes`' rows, each with its run's `axis` (the one axis whose requested version
    differs between the run's probe cells, from their stored `versions`; "" when they differ in
    none, a bisection stopped at its first probe, or in several), the probe's `value` on it
    (installed, else requested) and its `commit` there (a git or path candidate's), so that no
    reader takes them apart from the run id or a URL."""
    rows = store.fetch(
        f"""
        WITH p AS (
            SELECT run_id, cell_id, scenario, repeat, status, signature, blamed_library, versions, installed, git_commits,
                   {", ".join(AXIS_ORDER)}, gpu, started_at
            FROM ({_BISECTIONS})
        ),
        keyed AS (SELECT DISTINCT run_id, cell_id, versions, unnest(json_keys(versions)) AS axis FROM p),
        varying AS (SELECT run_id, axis FROM keyed GROUP BY run_id, axis HAVING count(DISTINCT versions->>axis) > 1),
        axes AS (SELECT run_id, CASE WHEN count(*) = 1 THEN min(axis) ELSE '' END AS axis FROM varying GROUP BY run_id)
        SELECT p.* EXCLUDE (installed), COALESCE(a.axis, '') AS axis,
               COALESCE(p.installed->>a.axis, p.versions->>a.axis, '') AS value, COALESCE(p.git_commits->>a.axis, '') AS commit
        FROM p LEFT JOIN axes a USING (run_id)
        ORDER BY p.run_id, p.started_at, p.cell_id, p.repeat
        """
    )
    return clauses.decode(rows, ("versions", "git_commits"))


#: The kinds of transition the heatmap draws an edge for (`heatmap.KIND_COLOURS`).
_EDGE_KINDS = ("introduced", "fixed")


def heatmap_edges(store: SqlResultsFile, *, by_file: bool = False) -> list[dict[str, Any]]:
    """The answers `harness attribute` stored for all runs (table `transitions`, scope "") as the
    heatmap marks them (`heatmap.edges_of` of `attributed.transitions`' rows, decided here): one row
    per distinct edge, `row` (the scenario, or with `by_file` its test file: the node id before its
    first `::`), `kind`, `headline`, `axis`, `before_cell`, `after_cell`, `signature`, and `n`, how
    many transitions give it; in the order of the first of them (attribution's: scope, scenario, seq).

    A suite of 100,000 tests × 20 cells stores 78,000 transitions: read, decoded and cached as
    rows they took 1.4 s (and as long again to pickle into Streamlit's cache); grouped here they
    are a few thousand rows. The heatmap's marks need only distinct edges in their first order
    (`heatmap.marks`), and the busiest axis their counts (`heatmap.busiest_axis`)."""
    if not store.has_table("transitions"):
        return []
    row = "split_part(scenario, '::', 1)" if by_file else "scenario"
    kinds = ", ".join(f"'{k}'" for k in _EDGE_KINDS)
    # str() of a missing value is 'None' in edges_of: the same words here
    headline = (
        "COALESCE(NULLIF(split_part(COALESCE(description, ''), ' — ', 1), ''), "
        "kind || ' in ' || COALESCE(axis, 'None') || ' ' || COALESCE(after, 'None'))"
    )
    return store.fetch(
        f"""
        WITH t AS (
            SELECT (scenario, seq) AS pos, {row} AS row, kind, {headline} AS headline,
                   COALESCE(axis, 'None') AS axis, COALESCE(before_cell, '') AS before_cell, after_cell,
                   COALESCE(signature, '') AS signature
            FROM transitions WHERE scope = '' AND kind IN ({kinds}) AND COALESCE(after_cell, '') <> ''
        )
        SELECT row, kind, headline, axis, before_cell, after_cell, signature, count(*) AS n
        FROM t GROUP BY ALL ORDER BY min(pos)
        """
    )


def test_pass_counts(store: SqlResultsFile) -> list[dict[str, Any]]:
    """`suites.test_pass_counts` (one row per node id and kind of host: `passing`, the cells where
    every outcome passed, a not_applicable beside them dropped; `tested`, the cells where it passed
    or failed), the same rows, read in a tenth of the time where the current state holds one
    outcome per test and cell: no repeats, each cell from one run (a night's suite). Then a cell's
    outcome is its verdict and no per-(test, cell) grouping is needed (2,000,000 groups at 100,000
    tests × 20 cells: 2.7 s of the Pin page's first render). Otherwise it is `suites.test_pass_counts`."""
    from harness.storage import suites

    shape = store.fetch(
        "SELECT COALESCE(max(repeat), 0) AS repeats, count(DISTINCT (run_id, cell_id)) AS pairs, count(DISTINCT cell_id) AS cells "
        "FROM outcomes"
    )[0]
    if shape["repeats"] != 0 or shape["pairs"] != shape["cells"]:
        return suites.test_pass_counts(store)
    # the host columns as `outcomes_v` reads them from the run (its only source of them)
    return store.fetch(
        f"""
        WITH h AS (
            SELECT run_id, host->>'gpu' AS gpu, TRY_CAST(host->>'gpu_count' AS INTEGER) AS gpu_count, host->>'platform' AS platform
            FROM runs
        )
        SELECT o.scenario, h.gpu, h.gpu_count, h.platform, count(*) FILTER (WHERE o.status = '{Status.PASS}') AS passing,
               count(*) FILTER (WHERE o.status IN ('{Status.PASS}', {clauses.FAILING})) AS tested
        FROM outcomes o LEFT JOIN h USING (run_id) GROUP BY ALL ORDER BY ALL
        """
    )


def newest_host(store: SqlResultsFile) -> list[dict[str, Any]]:
    """`gpu`, `gpu_count` and `platform` (as `outcomes_v` reads them) of the file's newest outcome
    (by `started_at`, then run id, as `pinning.newest_machine_of` orders the view), as one row, or
    none in an empty file: from `outcomes` and its run, without the view's join of every outcome
    with its cell (0.8 s at 2,000,000 outcomes; this, 0.05 s). Every outcome of one run has its
    run's host, so the row of the newest run decides."""
    return store.fetch(
        """
        WITH newest AS (SELECT run_id FROM outcomes ORDER BY started_at DESC NULLS LAST, run_id DESC LIMIT 1)
        SELECT r.host->>'gpu' AS gpu, TRY_CAST(r.host->>'gpu_count' AS INTEGER) AS gpu_count, r.host->>'platform' AS platform
        FROM newest n LEFT JOIN runs r USING (run_id)
        """
    )
