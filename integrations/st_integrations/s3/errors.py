"""S3 errors: the code, HTTP status and message of S3's error document
(AWS "Error responses"), and the mapping of StoreTorrent's errors onto them.

Thread safety: pure.
"""

from __future__ import annotations

from st_py.errors import StoreTorrentError

STATUS = {
    "AccessDenied": 403,
    "AuthorizationHeaderMalformed": 400,
    "BadDigest": 400,
    "BucketAlreadyOwnedByYou": 409,
    "BucketNotEmpty": 409,
    "EntityTooLarge": 400,
    "EntityTooSmall": 400,
    "IncompleteBody": 400,
    "InternalError": 500,
    "InvalidAccessKeyId": 403,
    "InvalidArgument": 400,
    "InvalidBucketName": 400,
    "InvalidPart": 400,
    "InvalidPartNumber": 416,
    "InvalidPartOrder": 400,
    "InvalidRange": 416,
    "InvalidRequest": 400,
    "KeyTooLongError": 400,
    "MalformedXML": 400,
    "MetadataTooLarge": 400,
    "MethodNotAllowed": 405,
    "MissingContentLength": 411,
    "NoSuchBucket": 404,
    "NoSuchKey": 404,
    "NoSuchUpload": 404,
    "NoSuchVersion": 404,
    "NotImplemented": 501,
    "PreconditionFailed": 412,
    "QuotaExceeded": 403,
    "RequestHeaderSectionTooLarge": 400,
    "RequestTimeTooSkewed": 403,
    "ServiceUnavailable": 503,
    "SignatureDoesNotMatch": 403,
    "SlowDown": 503,
    "XAmzContentChecksumMismatch": 400,
    "XAmzContentSHA256Mismatch": 400,
}


class S3Error(StoreTorrentError):
    """An S3 request refused or failed, as S3 says it.

    Attributes
    ----------
    code : str
        S3's error code (``NoSuchKey``, ...).
    message : str
        What went wrong, for the client.
    status : int
        The HTTP status of the code.
    resource : str
        The bucket or key concerned ("" if none).
    close : bool
        The answer closes the connection (``Connection: close``): the
        request's body was not read to its end, so no request may follow
        on it (a header section too large, a streamed PUT that failed).
    """

    def __init__(self, code: str, message: str, resource: str = "", close: bool = False):
        super().__init__(f"{code}: {message}")
        self.code, self.message, self.resource = code, message, resource
        self.status = STATUS.get(code, 400)
        self.close = close


def from_storetorrent(e: StoreTorrentError, resource: str = "") -> S3Error:
    """The S3 error a StoreTorrent error is to a client."""
    from st_py.errors import (
        BadMetadataError,
        BadNameError,
        MetadataTooLargeError,
        NotAuthenticatedError,
        NotEnoughPeersError,
        PermissionDeniedError,
        QuotaExceededError,
        RecordBeingWrittenError,
        RecordExistsError,
        RecordIsADirectoryError,
        RecordNotADirectoryError,
        RecordNotFoundError,
        RecordUnavailableError,
        StFileNotFoundError,
        TrackerUnavailableError,
    )

    from ..keymap import BadKeyError

    if isinstance(e, S3Error):
        return e
    if isinstance(e, BadKeyError):
        return S3Error("KeyTooLongError" if e.too_long else "InvalidArgument", str(e), resource)
    if isinstance(e, (PermissionDeniedError, NotAuthenticatedError)):
        return S3Error("AccessDenied", str(e), resource)
    if isinstance(e, MetadataTooLargeError):
        return S3Error("MetadataTooLarge", str(e), resource)
    if isinstance(e, BadMetadataError):
        return S3Error("InvalidArgument", str(e), resource)
    if isinstance(e, QuotaExceededError):
        return S3Error("QuotaExceeded", str(e), resource)
    if isinstance(e, (RecordNotFoundError, StFileNotFoundError)):
        return S3Error("NoSuchKey", "the specified key does not exist", resource)
    if isinstance(e, (BadNameError, RecordIsADirectoryError, RecordNotADirectoryError)):
        # a record is a record or a folder, never both (docs/decisions.md, "Record names"):
        # S3 keys "a" and "a/b" cannot both be objects here (docs/s3.md)
        return S3Error("InvalidArgument", str(e), resource)
    if isinstance(e, (RecordBeingWrittenError, RecordExistsError)):
        # Another writer's PUT of the key is under way, or committed it first (write-once
        # names). S3's own code for such a conflict, OperationAborted (409), is not retried by
        # the SDKs; a 503 is, and their retry then finds the key there (and replaces it) or free.
        return S3Error("ServiceUnavailable", f"another PUT of this key is under way: {e}; retry", resource)
    if isinstance(e, (TrackerUnavailableError, NotEnoughPeersError, RecordUnavailableError)):
        return S3Error("ServiceUnavailable", f"{type(e).__name__}: {e}; retry later", resource)
    return S3Error("InternalError", f"{type(e).__name__}: {e}", resource)
