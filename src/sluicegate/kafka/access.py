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
            mismatched = mismatched or (listening and isinstance(exc, KafkaError))
            problems.append(f"{address}: {_reason(exc)}")
        else:
            conn.close()
            return
    if unreachable_ok and not mismatched:
        return
    hint = "" if security.protocol != "PLAINTEXT" else " (a secured listener needs --kafka-security-protocol)"
    raise KafkaAccessError(f"cannot connect to Kafka as {who}{hint}: {'; '.join(problems)}")


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
