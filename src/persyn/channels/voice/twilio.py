"""Twilio's wire, as its public documentation gives it: request signatures and TwiML.

- Signatures (twilio.com/docs/usage/security#validating-requests): `X-Twilio-Signature` is the
  Base64 HMAC-SHA1, keyed by the account's auth token, of the full URL Twilio requested followed,
  for a form POST, by each parameter's name and value, sorted by name. A Media Streams WebSocket
  upgrade is signed the same way over the stream's URL (no parameters).
- TwiML for an answered call (twilio.com/docs/voice/twiml/stream): `<Connect><Stream url="wss://…">`
  with `<Parameter name=… value=…/>`s, which come back in the stream's `start.customParameters`;
  a rejected call `<Say>` then `<Hangup/>`, or `<Reject/>` (twilio.com/docs/voice/twiml/reject).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from xml.sax.saxutils import escape, quoteattr

__all__ = ["connect_twiml", "reject_twiml", "say_twiml", "signature", "signature_ok"]


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
