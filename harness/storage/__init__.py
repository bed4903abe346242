"""Results files: DuckDB (store*), JSON-lines shards (shardfile), the seam both satisfy, and the reads."""
