"""Twilio's wire, as its public documentation gives it: request signatures and TwiML.

- Signatures (twilio.com/docs/usage/security#validating-requests): `X-Twilio-Signature` is the
  Base64 HMAC-SHA1, keyed by the account's auth token, of the full URL Twilio requested followed,
  for a form POST, by each parameter's name and value, sorted by name. A Media Streams WebSocket
  upgrade is signed the same way over the stream's URL (no parameters).
- TwiML for an answered call (twilio.com/docs/voice/twiml/stream): `<Connect><Stream url="wss://…">`
  with `<Parameter name=… value=…/>`s, which come back in the stream's `start.customParameters`;
  a rejected call `<Say>` then `<Hangup/>`, or `<Reject/>` (twilio.com/docs/voice/twiml/reject).
- The REST API's calls (twilio.com/docs/voice/api/call-resource), HTTP basic auth with the account
  SID and auth token: `POST /2010-04-01/Accounts/{AccountSid}/Calls.json` (form `To`, `From`,
  `Url`, `Method`) places a call and answers 201 with the call resource (`sid`, `status`, …);
  `POST …/Calls/{CallSid}.json` with `Status=completed` hangs it up. A refusal is JSON with
  `code`, `message`, `more_info` and `status` (twilio.com/docs/usage/twilios-response#response-formats-exceptions).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast
from xml.sax.saxutils import escape, quoteattr

import httpx

__all__ = [
    "TOKEN_VARIABLE",
    "TwilioCalls",
    "TwilioRefused",
    "connect_twiml",
    "reject_twiml",
    "say_twiml",
    "signature",
    "signature_ok",
]

TOKEN_VARIABLE = "TWILIO_AUTH_TOKEN"  # the account's auth token: from the environment, never the file
_API_VERSION = "2010-04-01"
_TIMEOUT = 15.0


def signature(token: str, url: str, params: Mapping[str, str] | None = None) -> str:
    """The `X-Twilio-Signature` of a request to `url` with form `params`."""
    fields = params or {}
    payload = url + "".join(f"{key}{fields[key]}" for key in sorted(fields))
    digest = hmac.new(token.encode(), payload.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def signature_ok(token: str, url: str, params: Mapping[str, str] | None, given: str | None) -> bool:
    """Whether `given` is the request's signature (compared in constant time)."""
    if not token or not given:
        return False
    return hmac.compare_digest(signature(token, url, params), given)


def connect_twiml(stream_url: str, parameters: Mapping[str, str]) -> str:
    params = "".join(f"<Parameter name={quoteattr(k)} value={quoteattr(v)}/>" for k, v in parameters.items())
    return (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Response><Connect><Stream url={quoteattr(stream_url)}>{params}</Stream></Connect></Response>"
    )


def say_twiml(text: str) -> str:
    return f'<?xml version="1.0" encoding="UTF-8"?><Response><Say>{escape(text)}</Say><Hangup/></Response>'


def reject_twiml() -> str:
    return '<?xml version="1.0" encoding="UTF-8"?><Response><Reject reason="rejected"/></Response>'


class TwilioRefused(Exception):
    """The REST API said no (or could not be reached): `status` 0 when nothing answered."""

    def __init__(self, status: int, code: int | None, message: str) -> None:
        self.status, self.code, self.message = status, code, message
        named = f" (error {code})" if code is not None else ""
        super().__init__(f"{status}{named}: {message}" if status else message)


@dataclass(frozen=True)
class TwilioCalls:
    """The REST side of calls: `api_url` (Twilio's, or a fake's in tests), the account, its token."""

    api_url: str
    account_sid: str
    token: str

    async def place(self, to: str, from_: str, url: str) -> dict[str, Any]:
        """Places a call to `to`; Twilio fetches `url` (POST) when it is answered. The call resource."""
        return await self._post("Calls.json", {"To": to, "From": from_, "Url": url, "Method": "POST"}, 201)

    async def account(self) -> dict[str, Any]:
        """The account resource (twilio.com/docs/iam/api/account#fetch-an-account-resource):
        whether the API is reachable and takes these credentials."""
        return await self._request("GET", ".json", {}, 200)

    async def hang_up(self, call_sid: str) -> dict[str, Any]:
        return await self._post(f"Calls/{call_sid}.json", {"Status": "completed"}, 200)

    async def _post(self, path: str, form: Mapping[str, str], expected: int) -> dict[str, Any]:
        return await self._request("POST", f"/{path}", form, expected)

    async def _request(
        self, method: str, path: str, form: Mapping[str, str], expected: int
    ) -> dict[str, Any]:
        if not self.account_sid or not self.token:
            raise TwilioRefused(
                0, None, "no account: [voice.twilio] account_sid and TWILIO_AUTH_TOKEN are needed"
            )
        url = f"{self.api_url}/{_API_VERSION}/Accounts/{self.account_sid}{path}"
        try:
            async with httpx.AsyncClient(timeout=_TIMEOUT) as client:
                response = await client.request(
                    method, url, data=dict(form) or None, auth=(self.account_sid, self.token)
                )
        except httpx.HTTPError as exc:
            raise TwilioRefused(
                0, None, f"the Twilio API at {self.api_url} could not be reached: {exc}"
            ) from exc
        body = _json(response)
        if response.status_code != expected:
            code = body.get("code")
            message = body.get("message") or response.reason_phrase or "refused"
            raise TwilioRefused(response.status_code, code if isinstance(code, int) else None, str(message))
        return body


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        value = response.json()
    except ValueError:
        return {}
    return cast(dict[str, Any], value) if isinstance(value, dict) else {}
