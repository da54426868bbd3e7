"""A start-up check that Kafka accepts this process's credentials, with one clear error.

aiokafka reports a refused login only as "Unable to bootstrap" (the reason goes to
its log), and a PLAINTEXT client at a TLS listener just sees the connection close.
Commands call ``require_access`` first so that a wrong password or a missing
setting ends the process with one line naming what to fix.
"""

from __future__ import annotations

import asyncio
import ssl

from aiokafka.conn import create_conn
from aiokafka.errors import KafkaError, SaslAuthenticationFailed, UnsupportedSaslMechanismError

from sluicegate.kafka.security import KafkaSecurity, current_security


class KafkaAccessError(RuntimeError):
    """Kafka refused this process's connection or credentials; the message says why."""


async def check_access(
    bootstrap: str, security: KafkaSecurity | None = None, timeout_s: float = 15.0, unreachable_ok: bool = False
) -> None:
    """Connect (and log in) to the first bootstrap server that answers; raise KafkaAccessError
    if Kafka refuses the credentials or (unless ``unreachable_ok``: callers that wait for a
    broker to come up) no server can be reached. A server that takes the connection but
    fails the handshake is a refusal even then: it is up, and wants other settings."""
    security = security or current_security()
    who = security.describe()
    settings = security.aiokafka_settings()
    problems: list[str] = []
    mismatched = False
    """A server took the TCP connection, then the Kafka handshake failed: not a broker that
    is down, but a listener that wants other settings (e.g. PLAINTEXT at a SASL_SSL port)."""
    for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
        host, _, port = address.rpartition(":")
        listening = await _accepts_tcp(host, int(port), timeout_s)
        try:
            async with asyncio.timeout(timeout_s):
                conn = await create_conn(host, int(port), client_id="sluicegate-access-check", **settings)
        except SaslAuthenticationFailed as exc:
            raise KafkaAccessError(f"Kafka at {address} refused the login ({who}): {_reason(exc)}") from None
        except UnsupportedSaslMechanismError as exc:
            raise KafkaAccessError(f"Kafka at {address} does not accept {security.sasl_mechanism}: {exc}") from None
        except ssl.SSLError as exc:
            mismatched = mismatched or listening
            problems.append(f"{address}: TLS handshake failed ({exc.reason or exc}); check the CA and the protocol")
        except (OSError, TimeoutError, KafkaError) as exc:
            refusal = await _tls_refusal(host, int(port), security, timeout_s) if listening else None
            if refusal is not None:
                raise KafkaAccessError(f"Kafka at {address} refused the TLS connection ({who}): {refusal}") from None
            mismatched = mismatched or (listening and isinstance(exc, KafkaError))
            problems.append(f"{address}: {_reason(exc)}")
        else:
            conn.close()
            return
    if unreachable_ok and not mismatched:
        return
    hint = "" if security.protocol != "PLAINTEXT" else " (a secured listener needs --kafka-security-protocol)"
    raise KafkaAccessError(f"cannot connect to Kafka as {who}{hint}: {'; '.join(problems)}")


_API_VERSIONS_V0 = b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00"
"""A Kafka ApiVersions request (v0, empty client id), so that a broker that took the
connection answers at once instead of waiting for one."""


async def _tls_refusal(host: str, port: int, security: KafkaSecurity, timeout_s: float) -> str | None:
    """Why a TLS listener closed the connection, when it refused the client's certificate.
    With TLS 1.3 the client's handshake completes before the broker checks its certificate;
    the broker's alert comes with the first read, which aiokafka reports only as "connection
    closed". None: not TLS, or not a refused certificate."""
    context = security.ssl_context()
    if context is None:
        return None
    try:
        async with asyncio.timeout(min(timeout_s, 5.0)):
            reader, writer = await asyncio.open_connection(host, port, ssl=context)
            try:
                writer.write(_API_VERSIONS_V0)
                await reader.read(4)
            finally:
                writer.close()
    except ssl.SSLError as exc:
        return _certificate_refusal(str(exc.reason or exc), security)
    except (OSError, TimeoutError):
        return None
    return None


def _certificate_refusal(alert: str, security: KafkaSecurity) -> str | None:
    if not alert.endswith(
        (
            "ALERT_BAD_CERTIFICATE",
            "ALERT_CERTIFICATE_REQUIRED",
            "ALERT_UNKNOWN_CA",
            "ALERT_CERTIFICATE_UNKNOWN",
            "ALERT_CERTIFICATE_EXPIRED",
            "ALERT_ACCESS_DENIED",
        )
    ):
        return None
    if security.ssl_cert_location is None:
        return (
            f"its listener requires a client certificate and this client presents none (TLS alert {alert}): "
            "give one with SLUICEGATE_KAFKA_SSL_CERT_LOCATION and _SSL_KEY_LOCATION (--kafka-ssl-cert, --kafka-ssl-key)"
        )
    return (
        f"it does not accept the client certificate {security.ssl_cert_location} (TLS alert {alert}): "
        "is it signed by a CA in the broker's ssl.truststore, and still valid?"
    )


async def _accepts_tcp(host: str, port: int, timeout_s: float) -> bool:
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError):
        return False
    writer.close()
    return True


def _reason(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.split(": ", 1)[1] if text.startswith("[Error") and ": " in text else text


def require_access(bootstrap: str, security: KafkaSecurity | None = None, unreachable_ok: bool = False) -> None:
    """``check_access`` from synchronous code (the CLI commands, before they start)."""
    asyncio.run(check_access(bootstrap, security, unreachable_ok=unreachable_ok))
