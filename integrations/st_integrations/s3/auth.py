"""Signature Version 4 (AWS "Authenticating Requests": the Authorization
header and query-string parameters, i.e. presigned URLs), checked exactly: the canonical request rebuilt from
what arrived, the string to sign, the HMAC chain from the secret, and a
constant-time comparison.

Access keys are StoreTorrent users (docs/s3.md, "Access keys"): the access
key is the user's name and the secret their API key, read from the
endpoint's keys file. Without a keys file the endpoint runs in development
mode, as a tracker without ``--users`` does: every request is taken, signed
or not, and the signature is not checked.

Thread safety: :class:`Keys` is read-only after construction.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from calendar import timegm
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote

import tomllib

from .chunked import ChunkChain
from .errors import S3Error

ALGORITHM = "AWS4-HMAC-SHA256"
MAX_SKEW_S = 15 * 60  # S3's limit on a request's clock skew
_AUTH_RE = re.compile(
    r"^AWS4-HMAC-SHA256\s+Credential=([^/,\s]+)/(\d{8})/([^/,\s]*)/([^/,\s]+)/aws4_request\s*,\s*"
    r"SignedHeaders=([a-z0-9;\-]+)\s*,\s*Signature=([0-9a-f]{64})$"
)
_CRED_RE = re.compile(r"^([^/]+)/(\d{8})/([^/]*)/([^/]+)/aws4_request$")
MAX_PRESIGNED_S = 7 * 24 * 3600  # S3's longest presigned URL
UNSIGNED = "UNSIGNED-PAYLOAD"
STREAM_UNSIGNED = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
STREAM_SIGNED = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"  # each chunk signed (docs/s3.md, "Signed chunks")
STREAM_SIGNED_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"  # ... and a signed trailer
STREAMING = (STREAM_UNSIGNED, STREAM_SIGNED, STREAM_SIGNED_TRAILER)


@dataclass(frozen=True)
class Caller:
    """Who sent a request: ``user`` ("" anonymous in development mode) and
    ``api_key`` (None: the endpoint's own client)."""

    user: str
    api_key: str | None


class Keys:
    """The endpoint's access keys: ``{access key: secret}``, where the
    access key is a StoreTorrent user's name and the secret their API key.

    The file is TOML: ``[users]`` then ``alice = "<alice's API key>"``
    (docs/s3.md). ``None`` (no file): development mode. ``region``: the
    one region requests may be signed for (besides the empty one, which
    DuckDB signs for when ``s3_region`` is not set, as MinIO takes it).
    """

    def __init__(self, path: str | Path | None, region: str = "us-east-1"):
        self.path, self.region = path, region
        self.secrets: dict[str, str] | None = None
        if path is not None:
            with open(path, "rb") as f:
                users = tomllib.load(f).get("users", {})
            self.secrets = {str(k): str(v) for k, v in users.items()}

    @property
    def open(self) -> bool:
        """Development mode: no signature is checked."""
        return self.secrets is None


def _canonical_query(raw: str) -> str:
    pairs = []
    for part in raw.split("&") if raw else []:
        k, _, v = part.partition("=")
        pairs.append((quote(unquote(k.replace("+", "%20")), safe="-_.~"), quote(unquote(v), safe="-_.~")))
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def signing_key(secret: str, date: str, region: str, service: str) -> bytes:
    """The SigV4 signing key: HMAC-SHA256 chained over date, region,
    service and ``aws4_request``, from ``"AWS4" + secret``."""
    k = hmac.new(("AWS4" + secret).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def authenticate(  # noqa: C901 - one linear check, as the spec lists it
    keys: Keys, method: str, raw_path: str, raw_query: str, headers: dict[str, list[str]], now: float | None = None
) -> Caller:
    """Check a request's SigV4 signature: the ``Authorization`` header, or
    the query string of a presigned URL (``X-Amz-Signature``, ``UNSIGNED-PAYLOAD``,
    valid ``X-Amz-Expires`` seconds from ``X-Amz-Date``).

    Parameters
    ----------
    headers : dict
        Lower-cased header name -> its values in the order received.

    Raises
    ------
    S3Error
        ``AccessDenied`` (unsigned, an expired presigned URL),
        ``AuthorizationHeaderMalformed`` (not SigV4's form, or signed
        for another service, or for a region other than the endpoint's:
        the empty region, DuckDB's without ``s3_region``, is taken),
        ``InvalidAccessKeyId``, ``SignatureDoesNotMatch``,
        ``RequestTimeTooSkewed``, ``NotImplemented`` (a ``STREAMING-``
        payload other than :data:`STREAMING`, e.g. SigV4a's ECDSA).
    """
    auth = (headers.get("authorization") or [""])[0]
    if keys.open:
        m = _AUTH_RE.match(auth.strip())
        return Caller(m.group(1) if m else "", None)
    assert keys.secrets is not None
    query = dict(parse_qsl(raw_query, keep_blank_values=True))
    presigned = not auth and "X-Amz-Signature" in query
    if presigned:
        if query.get("X-Amz-Algorithm") != ALGORITHM:
            raise S3Error("AccessDenied", f"X-Amz-Algorithm must be {ALGORITHM}")
        m = _CRED_RE.match(query.get("X-Amz-Credential", ""))
        if not m:
            raise S3Error("AccessDenied", "X-Amz-Credential is not KEY/DATE/REGION/SERVICE/aws4_request")
        akid, date, region, service = m.groups()
        signed, signature = query.get("X-Amz-SignedHeaders", ""), query.get("X-Amz-Signature", "")
        amz_date = query.get("X-Amz-Date", "")
        payload = UNSIGNED
        canon_query = _canonical_query(
            "&".join(p for p in raw_query.split("&") if not p.startswith("X-Amz-Signature="))
        )
    elif auth:
        m = _AUTH_RE.match(auth.strip())
        if not m:
            raise S3Error(
                "AuthorizationHeaderMalformed",
                "the Authorization header is not AWS4-HMAC-SHA256 with Credential=KEY/YYYYMMDD/REGION/s3/aws4_request, "
                "SignedHeaders and Signature",
            )
        akid, date, region, service, signed, signature = m.groups()
        amz_date = (headers.get("x-amz-date") or headers.get("date") or [""])[0]
        payload = (headers.get("x-amz-content-sha256") or [""])[0]
        if not payload:
            raise S3Error("InvalidRequest", "x-amz-content-sha256 is required")
        canon_query = _canonical_query(raw_query)
    elif "AWSAccessKeyId" in query:
        raise S3Error("AccessDenied", "Signature Version 2 is not supported: presign with signature_version='s3v4'")
    else:
        raise S3Error("AccessDenied", "anonymous requests are refused: sign them with an access key (docs/s3.md)")
    if region not in (keys.region, "") or service != "s3":  # "": DuckDB's without s3_region (docs/s3.md)
        raise S3Error(
            "AuthorizationHeaderMalformed",
            f"the authorization is signed for region {region!r} and service {service!r}; "
            f"this endpoint expects {keys.region!r} and 's3'",
        )
    secret = keys.secrets.get(akid)
    if secret is None:
        raise S3Error("InvalidAccessKeyId", "the AWS access key Id you provided does not exist in our records")
    try:
        t = timegm(time.strptime(amz_date, "%Y%m%dT%H%M%SZ"))
    except ValueError:
        raise S3Error("AccessDenied", "x-amz-date is missing or not YYYYMMDDTHHMMSSZ") from None
    clock = time.time() if now is None else now
    if presigned:
        try:
            expires = int(query.get("X-Amz-Expires", ""))
        except ValueError:
            raise S3Error("AccessDenied", "X-Amz-Expires is not a number of seconds") from None
        if not 0 < expires <= MAX_PRESIGNED_S:
            raise S3Error("AccessDenied", f"X-Amz-Expires must be 1 to {MAX_PRESIGNED_S} seconds")
        if clock > t + expires:
            raise S3Error("AccessDenied", "Request has expired")
        if t - clock > MAX_SKEW_S:
            raise S3Error("RequestTimeTooSkewed", "the presigned URL is dated in the future")
    elif abs(clock - t) > MAX_SKEW_S:
        raise S3Error(
            "RequestTimeTooSkewed", "the difference between the request time and the server's time is too large"
        )
    if not amz_date.startswith(date):
        raise S3Error("SignatureDoesNotMatch", "the credential's date is not the request's date")
    if payload.startswith("STREAMING-") and payload not in STREAMING:
        raise S3Error(
            "NotImplemented", f"payload signing {payload} is not supported; use one of {', '.join(STREAMING)}"
        )
    if payload in (STREAM_SIGNED, STREAM_SIGNED_TRAILER) and presigned:
        raise S3Error("InvalidRequest", "a presigned URL's payload is UNSIGNED-PAYLOAD, not signed chunks")
    names = signed.split(";")
    if "host" not in names:
        raise S3Error("AccessDenied", "the signed headers must include host")
    canon_headers = "".join(n + ":" + ",".join(" ".join(v.split()) for v in headers.get(n, [])) + "\n" for n in names)
    canonical = "\n".join([method, raw_path, canon_query, canon_headers, signed, payload])
    scope = f"{date}/{region}/{service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    want = hmac.new(signing_key(secret, date, region, service), to_sign.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(want, signature):
        raise S3Error(
            "SignatureDoesNotMatch",
            "the request signature we calculated does not match the signature you provided; check your key",
        )
    return Caller(akid, secret)


def chunk_chain(keys: Keys, headers: dict[str, list[str]]) -> ChunkChain | None:
    """The :class:`.chunked.ChunkChain` that signs the request's chunks: its
    payload is :data:`STREAM_SIGNED` or :data:`STREAM_SIGNED_TRAILER` and
    the endpoint checks signatures (not development mode). None
    otherwise. Called after :func:`authenticate` took the request, whose
    ``Authorization`` header's signature is the chain's seed."""
    payload = (headers.get("x-amz-content-sha256") or [""])[0]
    if keys.open or payload not in (STREAM_SIGNED, STREAM_SIGNED_TRAILER):
        return None
    assert keys.secrets is not None
    m = _AUTH_RE.match((headers.get("authorization") or [""])[0].strip())
    if m is None:  # authenticate refused it already
        raise S3Error("AccessDenied", "signed chunks need an Authorization header")
    akid, date, region, service, _signed, seed = m.groups()
    amz_date = (headers.get("x-amz-date") or headers.get("date") or [""])[0]
    return ChunkChain(
        signing_key(keys.secrets[akid], date, region, service),
        amz_date,
        f"{date}/{region}/{service}/aws4_request",
        seed,
        payload == STREAM_SIGNED_TRAILER,
    )
