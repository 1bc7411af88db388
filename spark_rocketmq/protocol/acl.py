"""ACL 1.0 request signing (AclClientRPCHook), with no I/O."""

from __future__ import annotations

import base64
import hashlib
import hmac

from .javamap import hashmap_ordered

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: Left out of the signed content, as brokers leave it out of what they verify (4.9.8 PlainAccessValidator, 5.x
#: DefaultAuthenticationContextBuilder): the signature itself.
UNSIGNED_FIELDS = frozenset((SIGNATURE,))


def acl_signature(secret_key: str, fields: dict[str, str], body: bytes | memoryview | None) -> str:
    """Base64(HmacSHA1(secret, values of every extField but Signature, in key order,
    then the body)): the content a broker verifies."""
    content = b"".join(fields[k].encode("utf-8") for k in sorted(fields) if k not in UNSIGNED_FIELDS)
    if body:
        content += body
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def sign_fields(
    fields: dict[str, str] | None,
    body: bytes | memoryview | None,
    access_key: str,
    secret_key: str,
    security_token: str | None = None,
) -> dict[str, str]:
    """The extFields to send: the originals plus AccessKey (SecurityToken) and Signature, appended."""
    out = dict(fields or {})
    out[ACCESS_KEY] = access_key
    if security_token:
        out[SECURITY_TOKEN] = security_token
    signature = acl_signature(secret_key, out, body)
    # AclClientRPCHook puts Signature, then AccessKey, into the command's HashMap.
    out.pop(ACCESS_KEY)
    out[SIGNATURE] = signature
    out[ACCESS_KEY] = access_key
    return hashmap_ordered(out)
