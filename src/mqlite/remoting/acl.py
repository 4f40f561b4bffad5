"""RocketMQ ACL request signing (`AclClientRPCHook`, `AclUtils.combineRequestContent`, `AclSigner`).

A signed request carries `AccessKey` and `Signature` ext fields; the signature is HmacSHA1 of the
other ext fields' values in Java's `TreeMap` order followed by the body, base64.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

__all__ = ["sign", "ACCESS_KEY", "SIGNATURE"]

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"


def _java_order(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")  # a TreeMap<String, ...> sorts by UTF-16 code units


def sign(ext_fields: Mapping[str, str], body: bytes | None, secret_key: str) -> str:
    """RocketMQ ACL's signature: HmacSHA1, keyed by `secret_key`, of the values of the ext fields
    sorted by name (`Signature` itself left out) followed by the body; base64.

    >>> sign({"AccessKey": "ak", "topic": "t"}, b"x", "sk")
    '6SB4Yq5B3U7Vw40rFDCo15c7rEg='
    """
    content = "".join(ext_fields[k] for k in sorted(ext_fields, key=_java_order) if k != SIGNATURE)
    digest = hmac.new(secret_key.encode("utf-8"), content.encode("utf-8") + (body or b""), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")
