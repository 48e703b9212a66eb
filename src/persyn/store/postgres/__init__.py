"""The PostgreSQL backend: psycopg engines, pgvector, keyword search with BM25 over posting lists, its variants of the migrations."""
