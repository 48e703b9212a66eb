"""Dialog search on PostgreSQL: the messages' `text_tsv` column (migration 2's PostgreSQL
variant) and its GIN index. Everything else of the dialog part is the shared SQL of
`sql/dialog.py`, which is portable SQLAlchemy Core."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import Float, bindparam, column, select, text
from sqlalchemy.sql.selectable import TextualSelect

from persyn.store.base import Message
from persyn.store.postgres.engine import TEXT_CONFIG
from persyn.store.schema.tables import messages
from persyn.store.sql.dialog import MESSAGE_COLUMNS, RANK_FILTER, RANK_JOIN, SqlDialog
from persyn.store.sql.mapping import message_from_row

__all__ = ["PostgresDialog", "search_chunks"]


def search_chunks(query: str) -> list[str]:
    """The whitespace-separated chunks of `query` that hold a letter or digit (as
    `fts_query` reads them on SQLite); NULs are spaces. Each becomes a phrase, so tsquery
    syntax in the text (`&`, `|`, `!`, `<->`, `:*`) is only ever words."""
    return [chunk for chunk in query.replace("\x00", " ").split() if any(ch.isalnum() for ch in chunk)]


class PostgresDialog(SqlDialog):
    """The dialog part of `PostgresStore`: search through tsvector."""

    async def search_messages(
        self,
        agent_id: str,
        query: str,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 20,
    ) -> list[Message]:
        """Every chunk of `query` must occur, as a phrase (as FTS5 AND of quoted strings);
        best `ts_rank` first, newer first on ties. `since` and `until` are inclusive."""
        chunks = search_chunks(query)
        if not chunks or limit <= 0:
            return []
        phrases = " && ".join(
            f"phraseto_tsquery('{TEXT_CONFIG}', :chunk_{index})" for index in range(len(chunks))
        )
        match = text(f"text_tsv @@ ({phrases})").bindparams(
            *(bindparam(f"chunk_{index}", chunk) for index, chunk in enumerate(chunks))
        )
        rank = text(f"ts_rank(text_tsv, {phrases}) DESC").bindparams(
            *(bindparam(f"chunk_{index}", chunk) for index, chunk in enumerate(chunks))
        )
        statement = select(messages).where(match, messages.c.agent_id == agent_id)
        if since is not None:
            statement = statement.where(messages.c.created_at >= since)
        if until is not None:
            statement = statement.where(messages.c.created_at <= until)
        statement = statement.order_by(rank, messages.c.created_at.desc()).limit(limit)
        return await self._fetch_all("search_messages", statement, message_from_row)

    def _rank_statement(
        self, agent_id: str, words: Sequence[str], channels: Sequence[str], limit: int
    ) -> TextualSelect:
        """The OR (`||`) of each word's tsquery against the GIN-indexed `text_tsv`, ranked by
        `ts_rank`. Words are letters and digits only (`fts_any_words`): no tsquery syntax."""
        query = " || ".join(f"plainto_tsquery('{TEXT_CONFIG}', :word_{index})" for index in range(len(words)))
        return (
            text(
                f"SELECT {MESSAGE_COLUMNS}, ts_rank(messages.text_tsv, hit.q) AS score "
                f"FROM (SELECT ({query}) AS q) AS hit, messages {RANK_JOIN} "
                f"WHERE messages.text_tsv @@ hit.q AND {RANK_FILTER} "
                "ORDER BY score DESC, messages.created_at DESC, messages.id DESC LIMIT :limit"
            )
            .bindparams(
                *(bindparam(f"word_{index}", word) for index, word in enumerate(words)),
                bindparam("agent_id", agent_id),
                bindparam("channels", list(channels), expanding=True),
                bindparam("limit", limit),
            )
            .columns(*(column(c.name, c.type) for c in messages.c), column("score", Float()))
        )
