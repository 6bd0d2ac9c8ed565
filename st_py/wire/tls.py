"""TLS for the tracker's gRPC service (docs/security.md).

:func:`make_local_ca` makes what ``storetorrent up --tls`` needs: a private
certificate authority, a server certificate for the tracker and client
certificates (for mutual TLS: the user name is the certificate's common
name), with the ``cryptography`` library. :func:`channel` opens a client
channel with them. On a real cluster, use certificates from your own CA.

Environment for clients: ``STORETORRENT_TLS_CA`` (the CA certificate to trust),
and for mutual TLS ``STORETORRENT_TLS_CERT`` and ``STORETORRENT_TLS_KEY``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from pathlib import Path

import grpc

from st_py.wire.targets import grpc_target

# HTTP/2 keepalive: a tracker cut off the network (packets vanish, nothing is
# refused) is found in KEEPALIVE_S + KEEPALIVE_TIMEOUT_S; its calls fail
# UNAVAILABLE and are retried, and the channel connects to whichever of the
# tracker addresses answers (the new leader) instead of waiting a call's whole
# timeout on the silent one (tests/test_tracker_netns.py). The servers accept
# pings this often (SERVER_OPTIONS).
KEEPALIVE_S, KEEPALIVE_TIMEOUT_S = 2.0, 4.0

CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.keepalive_time_ms", int(KEEPALIVE_S * 1000)),
    ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT_S * 1000)),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]

SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", 256 * 1024 * 1024),
    ("grpc.max_send_message_length", 256 * 1024 * 1024),
    ("grpc.so_reuseport", 0),
    # clients ping every KEEPALIVE_S, with or without calls: not "too many pings"
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", int(KEEPALIVE_S * 1000 / 2)),
    ("grpc.http2.max_ping_strikes", 0),
]


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def make_local_ca(
    directory: str | os.PathLike, hosts: list[str], clients: list[str], days: int = 365
) -> dict[str, Path]:
    """Create ``ca.pem`` / ``ca.key``, ``tracker.pem`` / ``tracker.key`` (valid
    for ``hosts``: names or IP addresses) and ``<name>.pem`` / ``<name>.key``
    for each client name in ``directory``. Keys are written with mode 0600.

    Returns
    -------
    dict of name -> path ("ca", "tracker.pem", "tracker.key", "<client>.pem", ...)
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn: str) -> x509.Name:
        return x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "StoreTorrent local CA"),
                x509.NameAttribute(NameOID.COMMON_NAME, cn),
            ]
        )

    def pem_key(k) -> bytes:
        return k.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name("StoreTorrent CA"))
        .issuer_name(name("StoreTorrent CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    out = {"ca": d / "ca.pem"}
    (d / "ca.pem").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_private(d / "ca.key", pem_key(ca_key))

    def issue(stem: str, cn: str, server: bool) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        b = (
            x509.CertificateBuilder()
            .subject_name(name(cn))
            .issuer_name(ca_cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        )
        if server:
            sans: list[x509.GeneralName] = []
            for h in hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(h)))
                except ValueError:
                    sans.append(x509.DNSName(h))
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False).add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
            )
        else:
            b = b.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        cert = b.sign(ca_key, hashes.SHA256())
        (d / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_private(d / f"{stem}.key", pem_key(key))
        out[f"{stem}.pem"], out[f"{stem}.key"] = d / f"{stem}.pem", d / f"{stem}.key"

    issue("tracker", hosts[0] if hosts else "tracker", server=True)
    for c in clients:
        issue(c, c, server=False)
    return out


def channel(address: str, ca: str | None = None, cert: str | None = None, key: str | None = None) -> grpc.Channel:
    """A gRPC channel to the tracker: TLS if a CA is given (argument or
    ``$STORETORRENT_TLS_CA``), with a client certificate for mutual TLS if
    one is given (``$STORETORRENT_TLS_CERT`` / ``$STORETORRENT_TLS_KEY``)."""
    ca = ca or os.environ.get("STORETORRENT_TLS_CA")
    address = grpc_target(address)  # several addresses: one channel to whichever tracker answers
    if not ca:
        return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
    cert = cert or os.environ.get("STORETORRENT_TLS_CERT")
    key = key or os.environ.get("STORETORRENT_TLS_KEY")
    creds = grpc.ssl_channel_credentials(
        root_certificates=Path(ca).read_bytes(),
        private_key=Path(key).read_bytes() if cert and key else None,
        certificate_chain=Path(cert).read_bytes() if cert and key else None,
    )
    return grpc.secure_channel(address, creds, options=CHANNEL_OPTIONS)


def server_credentials(cert: str, key: str, client_ca: str | None = None) -> grpc.ServerCredentials:
    """The tracker's TLS credentials; with ``client_ca``, clients must show a
    certificate it signed (mutual TLS)."""
    return grpc.ssl_server_credentials(
        [(Path(key).read_bytes(), Path(cert).read_bytes())],
        root_certificates=Path(client_ca).read_bytes() if client_ca else None,
        require_client_auth=bool(client_ca),
    )
