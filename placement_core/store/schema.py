"""The run store's tables (SQLite, WAL mode): one statement list, created if missing."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blobs(hash TEXT PRIMARY KEY, kind TEXT NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    status TEXT NOT NULL,
    label TEXT,
    network_name TEXT NOT NULL,
    network_hash TEXT NOT NULL REFERENCES blobs(hash),
    devices_name TEXT NOT NULL,
    devices_hash TEXT NOT NULL REFERENCES blobs(hash),
    problem TEXT NOT NULL,
    algorithm TEXT NOT NULL,
    params TEXT NOT NULL,
    seed INTEGER NOT NULL,
    budget_evaluations INTEGER,
    budget_seconds REAL,
    evaluations INTEGER NOT NULL DEFAULT 0,
    best_objective REAL,
    best_placement TEXT,
    wall_s REAL,
    extras TEXT,
    error TEXT,
    host TEXT,
    pid INTEGER,
    initial_hash TEXT REFERENCES blobs(hash),
    pid_start TEXT,
    seeding TEXT
);
CREATE TABLE IF NOT EXISTS history(
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    evaluations INTEGER NOT NULL,
    best REAL NOT NULL,
    current REAL NOT NULL,
    PRIMARY KEY(run_id, evaluations)
);
CREATE TABLE IF NOT EXISTS archive(
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    niche TEXT NOT NULL,
    objective REAL NOT NULL,
    descriptors TEXT NOT NULL,
    placement TEXT NOT NULL,
    PRIMARY KEY(run_id, niche)
);
CREATE TABLE IF NOT EXISTS kept(
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    rank INTEGER NOT NULL,
    objective REAL NOT NULL,
    placement TEXT NOT NULL,
    PRIMARY KEY(run_id, rank)
);
CREATE TABLE IF NOT EXISTS checkpoints(
    run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    evaluations INTEGER NOT NULL,
    updated REAL NOT NULL,
    state BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS benchmarks(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
    network_name TEXT NOT NULL,
    devices_spec TEXT NOT NULL,
    runner TEXT NOT NULL,
    placement TEXT NOT NULL,
    simulated_s REAL,
    measured_median_s REAL,
    machine TEXT NOT NULL,
    result TEXT NOT NULL,
    label TEXT,
    network_hash TEXT,
    batch_size INTEGER
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status);
"""
