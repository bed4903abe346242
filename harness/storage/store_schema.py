"""The results file's schema: its tables' columns, the view users query, and the named migrations.

A DuckDB results file records the migrations applied to it (`schema_migrations`); opening one
applies the missing ones, in order, each in its own transaction. Every migration stays as it was
shipped: a file written by any earlier harness reaches the same schema. `store.py` opens files and
writes them; this module is only what they hold.
"""

from __future__ import annotations

from datetime import UTC, datetime

import duckdb

#: What the answers read: an outcome with its cell's versions and its run's machine (the newest
#: definition; migrations 0001-0008 wrote earlier ones). `test_id`: a suite's test's identity
#: across the suite's releases (`incell/suite.py`'s `test_identity`); the node id (`scenario`) where
#: none was stored, as in every file written before 0009, and for scenarios.
_OUTCOMES_VIEW_0009 = """
SELECT
    o.run_id, o.cell_id, o.scenario, o.repeat, o.status,
    o.signature, o.signature_family, o.blamed_library, o.exception_type, o.message,
    COALESCE(c.installed->>'torch', c.versions->>'torch') AS torch,
    COALESCE(c.installed->>'transformers', c.versions->>'transformers') AS transformers,
    COALESCE(c.installed->>'accelerate', c.versions->>'accelerate') AS accelerate,
    COALESCE(c.installed->>'peft', c.versions->>'peft') AS peft,
    COALESCE(c.installed->>'bitsandbytes', c.versions->>'bitsandbytes') AS bitsandbytes,
    c.versions, c.installed, c.git_commits, c.inherited, c.python,
    r.host->>'platform' AS platform,
    r.host->>'gpu' AS gpu,
    TRY_CAST(r.host->>'gpu_count' AS INTEGER) AS gpu_count,
    json_extract_string(r.host, '$.gpus[0]."memory.total"') AS gpu_memory,
    json_extract_string(r.host, '$.gpus[0].compute_cap') AS gpu_compute_capability,
    json_extract_string(r.host, '$.gpus[0].driver_version') AS gpu_driver,
    c.cuda_runtime,
    c.python_version,
    r.host->>'python' AS host_python,
    COALESCE(c.origin, 'matrix') AS origin,
    o.seconds, c.env_seconds, o.metrics, o.started_at,
    COALESCE(NULLIF(o.test_id, ''), o.scenario) AS test_id
FROM outcomes o
LEFT JOIN cells c USING (run_id, cell_id)
LEFT JOIN runs r USING (run_id)
"""
_TEST_ID_LINE = ",\n    COALESCE(NULLIF(o.test_id, ''), o.scenario) AS test_id"  # 0009's line of the view
#: The newest `outcomes_v` (0010): each row's `first_run`, the run its span began in (`history.py`).
OUTCOMES_VIEW = _OUTCOMES_VIEW_0009.replace(_TEST_ID_LINE, _TEST_ID_LINE + ",\n    COALESCE(o.first_run, o.run_id) AS first_run")
#: `outcomes_v`'s shape over the history: every older span, with the run it began in.
HISTORY_VIEW = OUTCOMES_VIEW.replace("FROM outcomes o", "FROM history o")
#: The view over a file whose outcomes have no `test_id` yet (written before 0009, opened by a reader).
_VIEW_WITHOUT_TEST_IDS = OUTCOMES_VIEW.replace("COALESCE(NULLIF(o.test_id, ''), o.scenario) AS test_id", "o.scenario AS test_id")

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "0001_initial",
        """
        CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            started_at TIMESTAMP NOT NULL,
            matrix_path TEXT,
            matrix_text TEXT,
            settings JSON,
            harness_version TEXT,
            host JSON
        );
        CREATE TABLE cells (
            run_id TEXT NOT NULL,
            cell_id TEXT NOT NULL,
            python TEXT,
            versions JSON,          -- axis -> requested version / git URL / "inherit"
            requirements JSON,      -- what was handed to the resolver
            installed JSON,         -- package -> exact installed version or URL (uv pip freeze)
            inherited JSON,         -- package -> version taken from the base interpreter
            git_commits JSON,       -- package -> commit for git and path candidates
            env_status TEXT,        -- ready | unresolvable | install_failed
            env_message TEXT,
            env_seconds DOUBLE,
            env_reused BOOLEAN,
            built_at TIMESTAMP,
            PRIMARY KEY (run_id, cell_id)
        );
        CREATE TABLE outcomes (
            run_id TEXT NOT NULL,
            cell_id TEXT NOT NULL,
            scenario TEXT NOT NULL,
            repeat INTEGER NOT NULL,
            status TEXT NOT NULL,
            message TEXT,
            signature TEXT,
            signature_family TEXT,
            blamed_library TEXT,
            exception_type TEXT,
            traceback TEXT,
            output_tail TEXT,
            seconds DOUBLE,
            metrics JSON,
            started_at TIMESTAMP,
            PRIMARY KEY (run_id, cell_id, scenario, repeat)
        );
        """,
    ),
    (
        "0002_outcomes_view",
        """
        CREATE OR REPLACE VIEW outcomes_v AS
        SELECT
            o.run_id, o.cell_id, o.scenario, o.repeat, o.status,
            o.signature, o.signature_family, o.blamed_library, o.exception_type, o.message,
            COALESCE(c.installed->>'torch', c.versions->>'torch') AS torch,
            COALESCE(c.installed->>'transformers', c.versions->>'transformers') AS transformers,
            COALESCE(c.installed->>'accelerate', c.versions->>'accelerate') AS accelerate,
            COALESCE(c.installed->>'peft', c.versions->>'peft') AS peft,
            COALESCE(c.installed->>'bitsandbytes', c.versions->>'bitsandbytes') AS bitsandbytes,
            c.versions, c.installed, c.git_commits, c.inherited, c.python,
            r.host->>'platform' AS platform,
            r.host->>'gpu' AS gpu,
            o.seconds, c.env_seconds, o.metrics, o.started_at
        FROM outcomes o
        LEFT JOIN cells c USING (run_id, cell_id)
        LEFT JOIN runs r USING (run_id);
        """,
    ),
    (
        # IF NOT EXISTS: a migration re-applied after its record was lost must not fail.
        "0003_transitions",
        """
        CREATE TABLE IF NOT EXISTS transitions (
            scope TEXT NOT NULL,        -- the run id the outcomes came from; '' for all runs
            scenario TEXT NOT NULL,
            signature TEXT NOT NULL,
            signature_family TEXT,
            axis TEXT NOT NULL,         -- '' for a flaky cell
            kind TEXT NOT NULL,         -- introduced | fixed | flaky
            before TEXT,                -- last candidate on the old side
            after TEXT,                 -- first candidate on the new side
            untested JSON,              -- known versions between them never tried on this line
            inconclusive JSON,          -- tried between them, but said nothing (n/a, flaky, ...)
            held JSON,                  -- the other axes, held fixed (a flaky cell: all its axes)
            before_cell TEXT,
            after_cell TEXT,
            runs JSON,
            description TEXT,
            seq INTEGER,                -- order within the scope: as attribution listed them
            computed_at TIMESTAMP
        );
        """,
    ),
    (
        # Hardware as data: the GPU's memory, compute capability and driver, and how many GPUs
        # the runner had, on every outcome row, so runs from different runners compare.
        "0004_hardware_columns",
        """
        CREATE OR REPLACE VIEW outcomes_v AS
        SELECT
            o.run_id, o.cell_id, o.scenario, o.repeat, o.status,
            o.signature, o.signature_family, o.blamed_library, o.exception_type, o.message,
            COALESCE(c.installed->>'torch', c.versions->>'torch') AS torch,
            COALESCE(c.installed->>'transformers', c.versions->>'transformers') AS transformers,
            COALESCE(c.installed->>'accelerate', c.versions->>'accelerate') AS accelerate,
            COALESCE(c.installed->>'peft', c.versions->>'peft') AS peft,
            COALESCE(c.installed->>'bitsandbytes', c.versions->>'bitsandbytes') AS bitsandbytes,
            c.versions, c.installed, c.git_commits, c.inherited, c.python,
            r.host->>'platform' AS platform,
            r.host->>'gpu' AS gpu,
            TRY_CAST(r.host->>'gpu_count' AS INTEGER) AS gpu_count,
            r.host->'gpus'->0->>'memory.total' AS gpu_memory,
            r.host->'gpus'->0->>'compute_cap' AS gpu_compute_capability,
            r.host->'gpus'->0->>'driver_version' AS gpu_driver,
            o.seconds, c.env_seconds, o.metrics, o.started_at
        FROM outcomes o
        LEFT JOIN cells c USING (run_id, cell_id)
        LEFT JOIN runs r USING (run_id);
        """,
    ),
    (
        # The CUDA runtime each cell's torch was built for (torch.version.cuda): with the
        # driver it says which native libraries (bitsandbytes') a cell could load.
        "0005_cuda_runtime",
        """
        ALTER TABLE cells ADD COLUMN IF NOT EXISTS cuda_runtime TEXT DEFAULT '';
        CREATE OR REPLACE VIEW outcomes_v AS
        SELECT
            o.run_id, o.cell_id, o.scenario, o.repeat, o.status,
            o.signature, o.signature_family, o.blamed_library, o.exception_type, o.message,
            COALESCE(c.installed->>'torch', c.versions->>'torch') AS torch,
            COALESCE(c.installed->>'transformers', c.versions->>'transformers') AS transformers,
            COALESCE(c.installed->>'accelerate', c.versions->>'accelerate') AS accelerate,
            COALESCE(c.installed->>'peft', c.versions->>'peft') AS peft,
            COALESCE(c.installed->>'bitsandbytes', c.versions->>'bitsandbytes') AS bitsandbytes,
            c.versions, c.installed, c.git_commits, c.inherited, c.python,
            r.host->>'platform' AS platform,
            r.host->>'gpu' AS gpu,
            TRY_CAST(r.host->>'gpu_count' AS INTEGER) AS gpu_count,
            r.host->'gpus'->0->>'memory.total' AS gpu_memory,
            r.host->'gpus'->0->>'compute_cap' AS gpu_compute_capability,
            r.host->'gpus'->0->>'driver_version' AS gpu_driver,
            c.cuda_runtime,
            o.seconds, c.env_seconds, o.metrics, o.started_at
        FROM outcomes o
        LEFT JOIN cells c USING (run_id, cell_id)
        LEFT JOIN runs r USING (run_id);
        """,
    ),
    (
        # What the answers need to say how sure they are: the cell's own Python and where it came
        # from (the matrix, or a refinement probe), the machine each transition holds on, how it
        # was obtained, and the releases on the index between tested versions (per run).
        "0006_machines_and_releases",
        """
        ALTER TABLE cells ADD COLUMN IF NOT EXISTS python_version TEXT DEFAULT '';
        ALTER TABLE cells ADD COLUMN IF NOT EXISTS origin TEXT DEFAULT 'matrix';
        ALTER TABLE transitions ADD COLUMN IF NOT EXISTS machine TEXT DEFAULT '';
        ALTER TABLE transitions ADD COLUMN IF NOT EXISTS other_machine TEXT DEFAULT '';
        ALTER TABLE transitions ADD COLUMN IF NOT EXISTS how TEXT DEFAULT '';
        CREATE TABLE IF NOT EXISTS releases (
            run_id TEXT NOT NULL,       -- the run that listed them ('' for a list fetched by `harness attribute`)
            axis TEXT NOT NULL,
            version TEXT NOT NULL,      -- a final, non-yanked release installable for the run's Python and platform
            uploaded_at TIMESTAMP,
            PRIMARY KEY (run_id, axis, version)
        );
        CREATE OR REPLACE VIEW outcomes_v AS
        SELECT
            o.run_id, o.cell_id, o.scenario, o.repeat, o.status,
            o.signature, o.signature_family, o.blamed_library, o.exception_type, o.message,
            COALESCE(c.installed->>'torch', c.versions->>'torch') AS torch,
            COALESCE(c.installed->>'transformers', c.versions->>'transformers') AS transformers,
            COALESCE(c.installed->>'accelerate', c.versions->>'accelerate') AS accelerate,
            COALESCE(c.installed->>'peft', c.versions->>'peft') AS peft,
            COALESCE(c.installed->>'bitsandbytes', c.versions->>'bitsandbytes') AS bitsandbytes,
            c.versions, c.installed, c.git_commits, c.inherited, c.python,
            r.host->>'platform' AS platform,
            r.host->>'gpu' AS gpu,
            TRY_CAST(r.host->>'gpu_count' AS INTEGER) AS gpu_count,
            r.host->'gpus'->0->>'memory.total' AS gpu_memory,
            r.host->'gpus'->0->>'compute_cap' AS gpu_compute_capability,
            r.host->'gpus'->0->>'driver_version' AS gpu_driver,
            c.cuda_runtime,
            c.python_version,
            r.host->>'python' AS host_python,
            COALESCE(c.origin, 'matrix') AS origin,
            o.seconds, c.env_seconds, o.metrics, o.started_at
        FROM outcomes o
        LEFT JOIN cells c USING (run_id, cell_id)
        LEFT JOIN runs r USING (run_id);
        """,
    ),
    (
        # Which records of each writer's journal (harness/storage/journal.py) the tables hold: a fold
        # inserts them and moves the offset in one transaction, so a record is folded once, and
        # a reader adds only what lies past the offset.
        "0007_journal_folds",
        """
        CREATE TABLE IF NOT EXISTS journal_folds (
            journal TEXT PRIMARY KEY,   -- a journal's file name in <db>.journal/
            folded_bytes BIGINT NOT NULL,  -- its records up to this byte are in the tables
            folded_at TIMESTAMP
        );
        """,
    ),
    (
        # DuckDB 2.0.0 stored `host->'gpus'->0->>'memory.total'` as `host->'gpus'->(0->>'…')`, and
        # 2.0.1 reads that text back as written and refuses it: every query of the view failed.
        # The view now names its JSON paths whole (readers lay it over an older file too).
        "0008_outcomes_v_json_paths",
        "CREATE OR REPLACE VIEW outcomes_v AS " + _OUTCOMES_VIEW_0009.replace(_TEST_ID_LINE, "") + ";",
    ),
    (
        # A test's identity across the releases of its suite: pytest numbers the parameters it
        # cannot print (`test_x[config_kwargs45]`), and a release that inserts cases renumbers
        # every later one. NULL: the node id (`scenario`) is the identity (every older row).
        "0009_test_identity",
        "ALTER TABLE outcomes ADD COLUMN IF NOT EXISTS test_id TEXT; CREATE OR REPLACE VIEW outcomes_v AS " + _OUTCOMES_VIEW_0009 + ";",
    ),
    (
        # A file kept for months: `outcomes` holds the current state (the newest run of each
        # machine, cell and test) and `history` what came before, as spans of equal outcomes
        # (`history.py`). `first_run`: the run a row's span began in (NULL: its own run);
        # `seconds_before`: the seconds of the observation before it. `flaky`: the (cell, test)
        # whose outcome flipped across runs with nothing changed, by the run of its current
        # state. The rows of an older file are split and merged into spans by `history.settle`
        # right after (`_AFTER`).
        "0010_history",
        """
        ALTER TABLE outcomes ADD COLUMN IF NOT EXISTS first_run TEXT;
        ALTER TABLE outcomes ADD COLUMN IF NOT EXISTS seconds_before DOUBLE;
        CREATE TABLE IF NOT EXISTS history AS SELECT * FROM outcomes LIMIT 0;
        CREATE TABLE IF NOT EXISTS flaky (run_id TEXT, cell_id TEXT, test TEXT, signature TEXT, reason TEXT);
        CREATE OR REPLACE VIEW outcomes_v AS """
        + OUTCOMES_VIEW
        + """;
        CREATE OR REPLACE VIEW history_v AS """
        + HISTORY_VIEW
        + ";",
    ),
    (
        # What each sweep of a suite collected in each cell (`collections.py`): a suite's current
        # state in a cell is what its newest run there collected. `collections`: per run and cell,
        # the selection it was given (canonical JSON: paths, k, m), the content address of its
        # list of tests in `collected` (NULL: a run before this migration, whose list was not
        # recorded) and the files that failed to collect (node id -> signature). A test an
        # earlier run collected that a newer one did not leaves `outcomes` with a
        # `not_collected` row in `history` (`status.NOT_COLLECTED`); an older file's runs are
        # read for the tests that left them right after (`_AFTER`).
        "0011_collections",
        """
        CREATE TABLE IF NOT EXISTS collections (
            run_id TEXT NOT NULL,
            cell_id TEXT NOT NULL,
            selection TEXT,
            digest TEXT,
            tests INTEGER,
            errors JSON,
            PRIMARY KEY (run_id, cell_id)
        );
        CREATE TABLE IF NOT EXISTS collected (digest TEXT NOT NULL, test TEXT NOT NULL);
        """,
    ),
    (
        # Why each change happened (`causes.py`, written by `harness explain`): per change (the run
        # that first showed it, the cell, its kind and signature), what moved between the two runs
        # and what the probes narrowed it to. Readers show it beside the change and never probe.
        "0012_causes",
        """
        CREATE TABLE IF NOT EXISTS causes (
            after_run TEXT NOT NULL,    -- the run that first showed the change
            before_run TEXT NOT NULL,   -- the last run that showed it as it was
            cell_id TEXT NOT NULL,
            kind TEXT NOT NULL,         -- regressed | fixed
            signature TEXT NOT NULL,    -- the failure: now (regressed), before (fixed)
            tests JSON,                 -- the changed tests (node ids) the probes ran
            verdict TEXT,               -- analysis.explain.Explanation's: culprit, set, static, flaky, budget, ...
            text TEXT,                  -- its one line
            explanation JSON,           -- what moved, the culprits, the commit, every probe
            probes INTEGER,
            seconds DOUBLE,
            explained_at TIMESTAMP,
            PRIMARY KEY (after_run, cell_id, kind, signature)
        );
        """,
    ),
)

#: The columns a record becomes, as the migrations left each table (an older file may lack the later ones).
OUTCOME_COLUMNS = (
    "run_id",
    "cell_id",
    "scenario",
    "repeat",
    "status",
    "message",
    "signature",
    "signature_family",
    "blamed_library",
    "exception_type",
    "traceback",
    "output_tail",
    "seconds",
    "metrics",
    "started_at",
    "test_id",
    "first_run",
    "seconds_before",
)
CELL_COLUMNS = (
    "run_id",
    "cell_id",
    "python",
    "versions",
    "requirements",
    "installed",
    "inherited",
    "git_commits",
    "env_status",
    "env_message",
    "env_seconds",
    "env_reused",
    "built_at",
    "cuda_runtime",
    "python_version",
    "origin",
)
RUN_COLUMNS = ("run_id", "started_at", "matrix_path", "matrix_text", "settings", "harness_version", "host")
RELEASE_COLUMNS = ("run_id", "axis", "version", "uploaded_at")


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)  # naive UTC: TIMESTAMPTZ would need pytz


def migration_names(con: duckdb.DuckDBPyConnection) -> list[str]:
    try:
        return [row[0] for row in con.execute("SELECT name FROM schema_migrations").fetchall()]
    except duckdb.CatalogException:
        return []  # a DuckDB file the harness never wrote: the migrations add its tables


def _split_history(con: duckdb.DuckDBPyConnection) -> None:
    from harness.storage.history import settle  # the rules of the split live there, beside its readers

    settle(con, rewrite=True)  # outcomes holds every night, and keeps one


def _collections_before(con: duckdb.DuckDBPyConnection) -> None:
    from harness.storage.collections import read_older_runs
    from harness.storage.history import settle

    read_older_runs(con)
    settle(con, rewrite=True)


#: Work a migration needs beyond its SQL, in its transaction: the rows of an older file settled.
_AFTER = {"0010_history": _split_history, "0011_collections": _collections_before}


def migrate(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Apply the migrations `con`'s file lacks, each in one transaction; returns their names."""
    con.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TIMESTAMP)")
    done = set(migration_names(con))
    applied = []
    for name, sql in MIGRATIONS:
        if name in done:
            continue
        con.execute("BEGIN TRANSACTION")
        try:
            con.execute(sql)
            if name in _AFTER:
                _AFTER[name](con)
            con.execute("INSERT INTO schema_migrations VALUES (?, ?)", [name, now()])
            con.execute("COMMIT")
        except Exception:
            con.execute("ROLLBACK")
            raise
        applied.append(name)
    return applied


def folded(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """journal name -> offset its records are folded up to ({} for a file from before 0007)."""
    try:
        return {str(name): int(end) for name, end in con.execute("SELECT journal, folded_bytes FROM journal_folds").fetchall()}
    except duckdb.CatalogException:
        return {}


def current_view(con: duckdb.DuckDBPyConnection) -> None:
    """Lay this harness's `outcomes_v` over the file's, in this read-only connection: a file a
    reader may not migrate (one DuckDB 2.0.0 wrote) still reads. A file older than the view's
    columns keeps its own."""
    for view, over_history in ((OUTCOMES_VIEW, HISTORY_VIEW), (_VIEW_WITHOUT_TEST_IDS, None)):
        try:
            con.execute("CREATE OR REPLACE TEMP VIEW outcomes_v AS " + view)
        except duckdb.Error:
            continue
        if over_history is not None:
            try:  # a file from before the split has the `history` view `history.lay_over` made
                con.execute("CREATE OR REPLACE TEMP VIEW history_v AS " + over_history)
            except duckdb.Error:
                pass
        return
