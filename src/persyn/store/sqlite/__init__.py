"""The SQLite backend: the default store, one file per installation — its engine and writer thread, sqlite-vec vectors, the approximate index, FTS5 keyword search."""
