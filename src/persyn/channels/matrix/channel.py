"""The Matrix adapter (SPEC §3): one account per served agent, over the client-server API.

The HTTP side is mautrix-python's `ClientAPI` (typed calls: login, whoami, join, leave, send,
receipt, createRoom, members, profile) over its `HTTPAPI` (raw JSON for `/sync` and
`/messages`, whose events are read as dicts here), on one aiohttp session per account. Only the
client-server layer is used, not mautrix's `Client`/syncer: the part that must be right here —
where the sync token is kept and when it moves — stays ours (a syncer moves its token when its
handlers return, and keeps it in its own store). Two gaps of mautrix are filled here: a 429 is
raised at once with `retry_after_ms` dropped, so an aiohttp middleware waits it out and resends
the same request; and its errors are translated to `ChannelError` at this boundary. Message
content in and out (what is text to answer, mentions, timeline order, the HTML of a reply) is
`_messages.py`; the state file an account keeps between runs is `_state.py`.

What it does:
- Every served agent logs in as `[channels.matrix] user_id` (`{agent}` filled) with
  MATRIX_ACCESS_TOKEN (one agent) or MATRIX_PASSWORD, on a fixed device id, so the
  homeserver's per-device transaction ids make a resent message one message.
- It joins `rooms` at start and accepts invitations by `join`: from `invites_from` (the
  allowlist), or with `join = "contacts"` also from a contact already in its directory; it
  declines the rest. Then it long-polls `/sync`. Every text message in a joined room becomes
  an `Event` (channel the room id); one in a direct chat (two members), one that mentions the
  agent (`m.mentions`, its user id, localpart or name) or that replies to or threads under its
  own message is addressed, the rest is overheard traffic, which gets the engagement decision.
  The events of one batch are submitted in timeline order with arrival times rising in that
  order, so the dialog keeps the room's order however their turns finish.
- Resuming: the sync token (`next_batch`) is kept in a small JSON file per account under the
  data directory, written (atomically) only after the batch's messages were submitted. A crash
  before that write replays the batch, and an event's id derives from the Matrix event id, so
  the store and the queue deduplicate it: nothing is missed and nothing answered twice. The
  first start takes the current position and answers no history; a gap longer than one sync's
  timeline (a long downtime) is fetched page by page with `/messages`.
- Replies answer the message they were given for: in a room, in its thread (a thread started on
  it when `threads`); in a direct chat as a reply. The body is the model's Markdown as plain
  `body` plus `org.matrix.custom.html` rendered with raw HTML disabled (model output is escaped,
  never markup) and images off (nothing loads a URL the model wrote).
- What it processed is marked read (a read receipt on the last event of each room's batch).
- Senders resolve through the directory key (`matrix`, homeserver, user id); the deployment's
  other agents and `bots` are marked `agent`.
- A 429 (M_LIMIT_EXCEEDED) is waited out (`retry_after_ms`, else `Retry-After`, at most 60 s,
  five sends) and the request sent again; a message keeps its transaction id (the outbox row's),
  so it is stored once.
- A delivery while the homeserver is unreachable raises (the outbox keeps the row); the sync loop
  retries with a jittered doubling backoff (`Backoff`), delivers the backlog on each (re)connection, tells its `link`.
- Media sent to the agent is kept, its caption the text (`_media.py`); overheard, or stored already
  (a replay), it is not fetched. End-to-end encryption is not supported: encrypted rooms are not seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Awaitable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import quote, urlparse

import aiohttp
from aiohttp.client_middlewares import ClientHandlerType
from mautrix.api import HTTPAPI, Method, PathBuilder
from mautrix.api import Path as ApiPath
from mautrix.client import ClientAPI
from mautrix.errors import MatrixError, MatrixRequestError
from mautrix.types import DeviceID, EventID, EventType, RoomCreatePreset, RoomID, UserID

from persyn.channels.matrix._media import kept_media, media_of
from persyn.channels.matrix._messages import (
    TEXT_TYPES,
    in_timeline_order,
    mentions_name,
    render_html,
    without_reply_fallback,
)
from persyn.channels.matrix._state import AccountState
from persyn.channels.matrix.config import MatrixConfig
from persyn.channels.text import split_message
from persyn.core.config import AgentConfig, SensesConfig
from persyn.core.errors import ChannelError, ConfigError, InputError
from persyn.core.events import Attachment, Event, Outbound, Speaker
from persyn.core.ids import derived_id
from persyn.core.messages import without_lone_surrogates
from persyn.runtime.api import RuntimeAPI
from persyn.runtime.channel import Backoff, Channel

__all__ = ["MATRIX_SERVICE", "MatrixChannel", "render_html"]

log = logging.getLogger(__name__)

MATRIX_SERVICE = "matrix"
_API = "/_matrix/client/v3"
_GAP_EVENTS = 1000  # most messages fetched to fill one room's gap after a downtime
# Characters per message: an event is capped at 64 KiB, and the body and its HTML are both in
# it (6,000 four-byte characters twice, or 6,000 `<` escaped as `&lt;`, stay well below).
_BODY_LIMIT = 6000
_RATE_LIMIT_TRIES = 5  # sends of one request while the homeserver answers 429
_RATE_LIMIT_WAIT_MAX = 60.0  # seconds: a longer retry_after is cut to this (then asked again)


class _MatrixError(ChannelError):
    def __init__(self, message: str, status: int, errcode: str) -> None:
        super().__init__(message)
        self.status = status
        self.errcode = errcode


T = TypeVar("T")


def _retry_after(response: aiohttp.ClientResponse, body: bytes) -> float:
    """Seconds a 429 asks to wait: `retry_after_ms` in the body (the spec before v1.10, and
    what Synapse sends), else the `Retry-After` header (seconds), else one second."""
    with contextlib.suppress(ValueError):
        data = json.loads(body or b"{}")
        if isinstance(data, dict) and isinstance(data.get("retry_after_ms"), int | float):
            return max(0.0, float(data["retry_after_ms"]) / 1000)
    with contextlib.suppress(ValueError, TypeError):
        return max(0.0, float(response.headers.get("Retry-After", "")))
    return 1.0


class _Account:
    """One agent's Matrix account: logs in, syncs, and reconnects with backoff."""

    def __init__(self, channel: MatrixChannel, agent: AgentConfig) -> None:
        self._owner = channel
        self.agent = agent
        self.user_id = channel.config.user_for(agent.name)
        self.server_name = self.user_id.partition(":")[2]
        self.device_id = f"PERSYN{agent.id[-10:]}"
        self.ready = asyncio.Event()
        self.connections = 0  # successful first syncs after a (re)connection (tests wait on it)
        self.syncs = 0
        self.rate_limited = 0  # 429 answers waited out (logged; tests read it)
        self.state = AccountState.load(channel.state_dir / f"{quote(self.user_id, safe='')}.json")
        self._token = channel.access_token
        self._client: ClientAPI | None = None
        self._members: dict[str, int] = {}
        self._display: dict[tuple[str, str], str] = {}
        self._joined_rooms = False
        self._save_lock = asyncio.Lock()
        self.link = channel.track(self.user_id, channel.api.clock.now)

    # HTTP (mautrix's client-server API over one aiohttp session) ---------------------------
    @property
    def client(self) -> ClientAPI:
        """The account's `ClientAPI`, made on first use (an aiohttp session belongs to the
        running event loop)."""
        if self._client is None:
            config = self._owner.config
            # No total timeout: it would also count the rate-limit waits of the middleware. A
            # stalled server is caught by the read timeout (a long poll sends nothing until done).
            session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(
                    total=None, connect=10, sock_read=config.sync_timeout_seconds + 30
                ),
                middlewares=(self._wait_out_rate_limit,),
                headers={"User-Agent": f"persyn {HTTPAPI.default_ua}"},
            )
            api = HTTPAPI(config.homeserver or "", self._token or "", client_session=session)
            self._client = ClientAPI(UserID(self.user_id), DeviceID(self.device_id), api=api)
        return self._client

    async def _wait_out_rate_limit(
        self, request: aiohttp.ClientRequest, handler: ClientHandlerType
    ) -> aiohttp.ClientResponse:
        """A 429 (M_LIMIT_EXCEEDED) is waited out and the same request sent again — mautrix
        raises it at once and drops `retry_after_ms`. A resent message keeps its transaction
        id, so the homeserver stores it once."""
        for _ in range(_RATE_LIMIT_TRIES - 1):
            response = await handler(request)
            if response.status != 429:
                return response
            wait = min(_retry_after(response, await response.read()), _RATE_LIMIT_WAIT_MAX)
            response.release()
            self.rate_limited += 1
            log.info("matrix: %s rate limited on %s; waiting %.2f s", self.user_id, request.url.path, wait)
            await asyncio.sleep(wait)
        return await handler(request)  # still limited: mautrix raises it, the caller retries later

    async def _call(self, what: str, request: Awaitable[T]) -> T:
        """One client-server call, its errors translated to `ChannelError` at this boundary."""
        try:
            return await request
        except MatrixRequestError as exc:
            raise _MatrixError(
                f"matrix {what}: HTTP {exc.http_status} {exc.errcode} {exc.message!r}",
                exc.http_status,
                str(exc.errcode or ""),
            ) from exc
        except (MatrixError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
            raise ChannelError(f"matrix {what}: {type(exc).__name__}: {exc}") from exc

    async def _raw(self, method: Method, path: PathBuilder, params: Mapping[str, str]) -> dict[str, Any]:
        """An endpoint read as plain JSON (sync and history: their events are kept as dicts)."""
        data = await self._call(
            f"{method} /{path}", self.client.api.request(method, path, query_params=params)
        )
        return cast("dict[str, Any]", data) if isinstance(data, dict) else {}

    async def close(self) -> None:
        if self._client is not None:
            await self._client.api.session.close()
            self._client = None

    async def _persist(self) -> None:
        # One writer at a time (the sync loop and deliveries both save); the snapshot is
        # taken under the lock, so the file written last is the newest state.
        async with self._save_lock:
            await asyncio.to_thread(self.state.write, self.state.snapshot())

    # the sync loop -------------------------------------------------------------------------
    async def run(self) -> None:
        config = self._owner.config
        backoff = Backoff(config.reconnect_min_seconds, config.reconnect_max_seconds)
        while True:
            try:
                if self._token is None:
                    await self._login()
                if not self._joined_rooms:
                    await self._join_configured()
                await self._sync_once()
                backoff.reset()
                if not self.ready.is_set():
                    self.ready.set()
                    self.connections += 1
                    self.link.up()
                    self._owner.connected()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if (
                    isinstance(exc, _MatrixError)
                    and exc.errcode == "M_UNKNOWN_TOKEN"
                    and self._owner.password
                ):
                    self._token = None  # logged out elsewhere: log in again
                    self.client.api.token = ""
                log.warning("matrix %s (%s): %s", config.homeserver, self.user_id, exc)
                self.link.lost(exc)
                self.ready.clear()
                await asyncio.sleep(backoff.next())

    async def _login(self) -> None:
        password = self._owner.password
        if password is None:
            raise ChannelError("neither MATRIX_ACCESS_TOKEN nor MATRIX_PASSWORD is set")
        done = await self._call(
            "login",
            self.client.login(
                identifier=UserID(self.user_id),
                password=password,
                device_id=self.device_id,
                device_name=f"persyn ({self.agent.name})",
                store_access_token=True,  # the client sends it from now on
            ),
        )
        self._token = done.access_token
        self.device_id = str(done.device_id or self.device_id)
        await self._set_display_name()

    async def check_token(self) -> None:
        """With an access token: it must belong to the configured user."""
        who = await self._call("whoami", self.client.whoami())
        if who.user_id != self.user_id:
            raise ConfigError(
                f"MATRIX_ACCESS_TOKEN belongs to {who.user_id!r}, not to the configured "
                f"[channels.matrix] user_id {self.user_id!r}"
            )
        await self._set_display_name()

    async def _set_display_name(self) -> None:
        # Only when it differs: every change is a membership event in every joined room.
        with contextlib.suppress(ChannelError):
            await self._call("displayname", self.client.set_displayname(self.agent.name, check_current=True))

    async def _join_configured(self) -> None:
        if self._owner.access_token is not None and not self._joined_rooms:
            await self.check_token()
        for room in self._owner.config.rooms:
            try:
                await self._call(f"join {room}", self.client.join_room(RoomID(room), max_retries=0))
            except _MatrixError as exc:  # a room that refuses us is reported, the others are served
                log.warning("matrix: %s could not join %s: %s", self.user_id, room, exc)
        self._joined_rooms = True

    def _filter(self, *, first_start: bool = False) -> str:
        limit = self._owner.config.timeline_limit
        # Synapse answers a /sync identical to one of the last two minutes (same user, device,
        # since, filter, timeout) from its response cache: a first start soon after another one
        # on this account would get that one's old position and take everything said since
        # as new. A first start's filter carries a field of its own (filters allow unknown
        # fields) so its answer is always fresh.
        nonce = {"org.persyn.first_start": secrets.token_hex(8)} if first_start else {}
        return json.dumps(
            {
                **nonce,
                "presence": {"types": []},
                "account_data": {"types": []},
                "room": {
                    "timeline": {"limit": limit, "types": ["m.room.message", "m.room.member"]},
                    "state": {"types": ["m.room.member"], "lazy_load_members": True},
                    "ephemeral": {"types": []},
                    "account_data": {"types": []},
                },
            }
        )

    async def _sync_once(self) -> None:
        since = self.state.next_batch
        params: dict[str, str] = {"filter": self._filter(first_start=since is None), "timeout": "0"}
        if since is not None:  # else the first start: take the position, answer no history
            params["since"] = since
            if self.ready.is_set():
                params["timeout"] = str(self._owner.config.sync_timeout_seconds * 1000)
        data = await self._raw(Method.GET, ApiPath.v3.sync, params)
        rooms = data.get("rooms") or {}
        for room_id, invited in (rooms.get("invite") or {}).items():
            await self._invited(str(room_id), invited)
        batch: list[tuple[str, dict[str, Any]]] = []
        for room_id, joined in (rooms.get("join") or {}).items():
            batch.extend(await self._joined(str(room_id), joined, history=since is not None))
        for room_id in rooms.get("leave") or {}:
            self._members.pop(str(room_id), None)
        await self._submit(batch)
        next_batch = data.get("next_batch")
        if isinstance(next_batch, str) and next_batch != self.state.next_batch:
            self.state.next_batch = next_batch
            await self._persist()
        self.syncs += 1

    # rooms ------------------------------------------------------------------------------------
    async def _may_invite(self, inviter: str) -> bool:
        """`join = "allowlist"`: `invites_from` (empty = the agent's own homeserver);
        `"contacts"`: a contact already in the directory, or `invites_from` as written."""
        config = self._owner.config
        allowed = config.invites_from
        listed = (
            "*" in allowed
            or inviter in allowed
            or any(entry.startswith(":") and inviter.endswith(entry) for entry in allowed)
        )
        if config.join == "allowlist":
            return listed if allowed else inviter.endswith(f":{self.server_name}")
        if listed:
            return True
        try:
            return bool(inviter) and await self._owner.api.knows_speaker(
                self.agent.id, self._speaker(inviter, "")
            )
        except Exception as exc:  # the directory unreadable: decline (an invitation can be sent again)
            log.warning("matrix: could not look %s up in the directory: %s", inviter, exc)
            return False

    def _speaker(self, user: str, name: str) -> Speaker:
        """A Matrix user as a speaker: the directory key is (matrix, homeserver, user id)."""
        return Speaker(
            service=MATRIX_SERVICE,
            channel=self._owner.network,
            speaker_id=user,
            display_name=name or user[1:].partition(":")[0],
            kind="agent" if self._owner.is_agent(user) else "human",
        )

    async def _invited(self, room_id: str, invited: Mapping[str, Any]) -> None:
        inviter = ""
        for event in (invited.get("invite_state") or {}).get("events") or []:
            if event.get("type") == "m.room.member" and event.get("state_key") == self.user_id:
                inviter = str(event.get("sender") or "")
        try:
            if await self._may_invite(inviter):
                await self._call(f"join {room_id}", self.client.join_room_by_id(RoomID(room_id)))
                log.info("matrix: %s joined %s (invited by %s)", self.user_id, room_id, inviter)
            else:
                reason = "invitations are not accepted from you"
                await self._call(f"leave {room_id}", self.client.leave_room(RoomID(room_id), reason=reason))
                log.info("matrix: %s declined %s's invitation to %s", self.user_id, inviter, room_id)
        except _MatrixError as exc:
            log.warning("matrix: answering the invitation to %s failed: %s", room_id, exc)

    async def _joined(
        self, room_id: str, joined: Mapping[str, Any], *, history: bool
    ) -> list[tuple[str, dict[str, Any]]]:
        count = (joined.get("summary") or {}).get("m.joined_member_count")
        if isinstance(count, int):
            self._members[room_id] = count
        for event in (joined.get("state") or {}).get("events") or []:
            self._member_event(room_id, event, changed=False)  # lazy-loaded: who spoke, as they are
        timeline = joined.get("timeline") or {}
        events: list[dict[str, Any]] = [e for e in timeline.get("events") or [] if isinstance(e, dict)]
        for event in events:
            self._member_event(room_id, event, changed=not isinstance(count, int))
        if not history:
            return []
        # Newly joined: only what was said after the agent came in (the timeline of a room just
        # joined holds earlier history, which nobody said to the agent).
        arrived = [
            i
            for i, e in enumerate(events)
            if e.get("type") == "m.room.member"
            and e.get("state_key") == self.user_id
            and (e.get("content") or {}).get("membership") == "join"
            and ((e.get("unsigned") or {}).get("prev_content") or {}).get("membership") != "join"
        ]
        if arrived:
            events = events[arrived[-1] + 1 :]
        elif timeline.get("limited") and timeline.get("prev_batch") and self.state.next_batch:
            events = await self._gap(room_id, str(timeline["prev_batch"]), self.state.next_batch) + events
        return [(room_id, e) for e in events if e.get("type") == "m.room.message"]

    def _member_event(self, room_id: str, event: Mapping[str, Any], *, changed: bool) -> None:
        if event.get("type") != "m.room.member":
            return
        user = str(event.get("state_key") or "")
        content = event.get("content") or {}
        if isinstance(content.get("displayname"), str):
            self._display[(room_id, user)] = content["displayname"]
        if changed:
            self._members.pop(room_id, None)  # someone came or went: count again when needed

    async def _gap(self, room_id: str, before: str, since: str) -> list[dict[str, Any]]:
        """The messages between the last sync and this one's timeline (oldest first)."""
        found: list[dict[str, Any]] = []
        token: str | None = before
        path = ApiPath.v3.rooms[room_id].messages
        while token and len(found) < _GAP_EVENTS:
            page = await self._raw(
                Method.GET,
                path,
                {
                    "from": token,
                    "to": since,
                    "dir": "b",
                    "limit": "100",
                    "filter": json.dumps({"types": ["m.room.message"]}),
                },
            )
            chunk = [e for e in page.get("chunk") or [] if isinstance(e, dict)]
            if not chunk:
                break
            found.extend(chunk)
            end = page.get("end")
            token = str(end) if end and end != token else None
        return list(reversed(found))

    async def _member_count(self, room_id: str) -> int:
        count = self._members.get(room_id)
        if count is None:
            try:
                joined = await self._call("members", self.client.get_joined_members(RoomID(room_id)))
                count = len(joined)
            except ChannelError:
                count = 0
            self._members[room_id] = count
        return count

    # inbound ----------------------------------------------------------------------------------
    async def _submit(self, batch: list[tuple[str, dict[str, Any]]]) -> None:
        """Each message as an event, in order; then a read receipt per room."""
        events: list[tuple[str, str, Event]] = []
        for room_id, message in batch:
            event = await self._event(room_id, message)
            if event is not None:
                events.append((room_id, str(message["event_id"]), event))
        events = in_timeline_order(events)
        if events:
            # Where to answer is known before anything is submitted: a recovered turn after a
            # crash finds it, even if the batch is not seen again.
            await self._persist()
        last: dict[str, str] = {}
        for room_id, matrix_id, event in events:
            try:
                if event.text.strip() or not event.attachments:  # a photo alone is its attachment
                    self._owner.api.validate_text(event.text)
                await self._owner.api.submit(event)
            except InputError as exc:
                log.warning("matrix: dropped a message in %s: %s", room_id, exc)
            last[room_id] = matrix_id
        for room_id, matrix_id in last.items():
            try:
                await self._call("receipt", self.client.send_receipt(RoomID(room_id), EventID(matrix_id)))
            except ChannelError as exc:  # a receipt is a courtesy: the message is stored
                log.info("matrix: read receipt in %s failed: %s", room_id, exc)

    async def _event(self, room_id: str, message: Mapping[str, Any]) -> Event | None:
        sender = str(message.get("sender") or "")
        content = message.get("content") or {}
        body = content.get("body")
        matrix_id = message.get("event_id")
        if sender == self.user_id or not isinstance(matrix_id, str) or not isinstance(body, str):
            return None
        relation = content.get("m.relates_to") or {}
        media = media_of(content)
        if (content.get("msgtype") not in TEXT_TYPES and media is None) or relation.get(
            "rel_type"
        ) == "m.replace":
            return None  # notices, edits: nothing said to answer (an edit repeats a message)
        replied = str((relation.get("m.in_reply_to") or {}).get("event_id") or "")
        body = media.caption if media is not None else body
        text = without_lone_surrogates(without_reply_fallback(body) if replied else body)  # a "\ud800"
        name = without_lone_surrogates(self._display.get((room_id, sender)) or sender[1:].partition(":")[0])
        if content.get("msgtype") == "m.emote":
            text = f"* {name} {text}"
        thread = str(relation.get("event_id") or "") if relation.get("rel_type") == "m.thread" else ""
        direct = await self._member_count(room_id) == 2
        if direct:
            self.state.direct.setdefault(sender, room_id)
        mentions = (content.get("m.mentions") or {}).get("user_ids") or []
        addressed = (
            direct
            or self.user_id in mentions
            or replied in self.state.mine
            or (thread and thread in self.state.mine)
            or any(
                mentions_name(text, n)
                for n in (self.user_id, self.user_id[1:].partition(":")[0], self.agent.name)
            )
        )
        said_at = datetime.fromtimestamp(int(message.get("origin_server_ts") or 0) / 1000, UTC)
        now = self._owner.api.clock.now()
        event_id = derived_id(said_at, MATRIX_SERVICE, self.agent.id, matrix_id)
        attachments: tuple[Attachment, ...] = ()
        if media is not None:
            stored = await self._owner.api.get_event(self.agent.id, event_id)
            if stored is not None:  # a replayed batch: its file was kept and read already
                self.state.answered[event_id] = [room_id, matrix_id, thread, sender]
                return stored
            owner = self._owner
            attachments, lead = await kept_media(
                self.client, owner.api, owner.senses, self.agent.id, room_id, sender, media, bool(addressed)
            )
            text = f"{lead} {text}".strip()  # refused or overheard, the file is named to the agent
        if not text.strip() and not attachments:
            return None
        event = Event(
            id=event_id,
            agent_id=self.agent.id,
            service=MATRIX_SERVICE,
            channel=room_id,
            speaker=self._speaker(sender, name),
            text=text,
            received_at=min(said_at, now) if said_at.year > 2000 else now,
            addressed=bool(addressed),
            attachments=attachments,
        )
        self.state.answered[event.id] = [room_id, matrix_id, thread, sender]
        return event

    # outbound ---------------------------------------------------------------------------------
    async def _direct_room(self, user: str) -> str:
        known = self.state.direct.get(user)
        if known is not None:
            return known
        created = await self._call(
            "createRoom",
            self.client.create_room(
                is_direct=True, invitees=[UserID(user)], preset=RoomCreatePreset.TRUSTED_PRIVATE
            ),
        )
        room = str(created)
        self.state.direct[user] = room
        await self._persist()
        return room

    async def say(self, outbound: Outbound) -> None:
        if not self.ready.is_set():
            raise ChannelError(
                f"{self.user_id!r} is not connected to Matrix; the message waits in the outbox"
            )
        room = outbound.channel
        if room.startswith("@"):
            room = await self._direct_room(room)
        relation: dict[str, Any] | None = None
        mentions: list[str] = []
        answered = self.state.answered.get(outbound.event_id)
        if answered is not None and answered[0] == room:
            _, matrix_id, thread, sender = answered
            mentions = [sender]
            in_room = await self._member_count(room) != 2
            if thread or (self._owner.config.threads and in_room):
                relation = {
                    "rel_type": "m.thread",
                    "event_id": thread or matrix_id,
                    "is_falling_back": False,
                    "m.in_reply_to": {"event_id": matrix_id},
                }
            else:
                relation = {"m.in_reply_to": {"event_id": matrix_id}}
        key = outbound.outbox_id or outbound.message_id
        for index, piece in enumerate(split_message(outbound.text, _BODY_LIMIT)):
            content: dict[str, Any] = {
                "msgtype": "m.text",
                "body": piece,
                "format": "org.matrix.custom.html",
                "formatted_body": render_html(piece),
                "m.mentions": {"user_ids": mentions},
            }
            if relation is not None:
                content["m.relates_to"] = relation
            # The transaction id is the outbox row's: a resend (after a restart, a lost answer
            # or a 429) is the same message to the homeserver.
            sent = await self._call(
                f"send to {room}",
                self.client.send_message_event(
                    RoomID(room), EventType.ROOM_MESSAGE, cast("Any", content), txn_id=f"{key}.{index}"
                ),
            )
            self.state.mine.append(str(sent))
        await self._persist()


class MatrixChannel(Channel):
    """The `matrix` service: every served agent's account on `[channels.matrix] homeserver`."""

    service = MATRIX_SERVICE

    def __init__(
        self,
        config: MatrixConfig,
        agents: Mapping[str, AgentConfig],
        api: RuntimeAPI,
        *,
        state_dir: Path,
        access_token: str | None = None,
        password: str | None = None,
        senses: SensesConfig | None = None,
    ) -> None:
        if not config.homeserver:
            raise ChannelError("[channels.matrix] homeserver is not set")
        chosen = {name.lower() for name in config.agents}
        served = {k: a for k, a in agents.items() if not chosen or a.name.lower() in chosen}
        if access_token is None and password is None:
            raise ConfigError(
                "[channels.matrix] needs MATRIX_ACCESS_TOKEN or MATRIX_PASSWORD in the environment"
            )
        if access_token is not None and len(served) > 1:
            raise ConfigError(
                "MATRIX_ACCESS_TOKEN is one account, but several agents are on Matrix: use MATRIX_PASSWORD "
                "(each agent's account) or list one agent in [channels.matrix] agents"
            )
        self.config = config
        self.api = api
        self.state_dir = state_dir
        self.access_token = access_token
        self.password = password
        self.senses = senses or SensesConfig()
        parsed = urlparse(config.homeserver)
        self.network = parsed.netloc.lower()
        self.accounts = {agent_id: _Account(self, agent) for agent_id, agent in served.items()}
        self._others = {a.user_id for a in self.accounts.values()} | {
            config.user_for(a.name) for a in agents.values()
        }
        self._tasks: set[asyncio.Task[None]] = set()

    # lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        await self.api.attach_channel(self)
        for account in self.accounts.values():
            self._spawn(account.run())

    async def stop(self) -> None:
        self.api.detach_channel(self)
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for account in self.accounts.values():
            await account.close()

    def _spawn(self, coroutine: Any) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def connected(self) -> None:
        """Synced (again): what waited in the outbox goes out now."""
        self._spawn(self._deliver_backlog())

    async def _deliver_backlog(self) -> None:
        try:
            await self.api.deliver_pending(MATRIX_SERVICE)
        except Exception as exc:  # the outbox poll retries it
            log.warning("matrix: delivering the backlog failed: %s", exc)

    def is_agent(self, user_id: str) -> bool:
        return user_id in self._others or user_id in self.config.bots

    # the channel port ----------------------------------------------------------------------
    def serves(self, agent_id: str) -> bool:
        return agent_id in self.accounts

    async def deliver(self, outbound: Outbound) -> None:
        account = self.accounts.get(outbound.agent_id)
        if account is None:
            raise ChannelError(f"agent {outbound.agent_id!r} is not on Matrix here")
        await account.say(outbound)
