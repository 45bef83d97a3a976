"""Result webhooks: a grader's `callback_url` gets the finished submission, signed, at least once.

**Outbox.** When a result is stored (gradlab/queue.py) and the submission has a callback URL,
a `webhook_delivery` row with the exact JSON body is added *in the same transaction*. Nothing is
sent in the grading worker's path, and a delivery survives any restart.

**Dispatchers** (`Dispatcher`: threads in every worker process, `GRADLAB_WEBHOOK_DISPATCH`)
lease due rows like the job queue leases jobs: one atomic `UPDATE ... RETURNING` (on PostgreSQL
the candidate is picked `FOR UPDATE SKIP LOCKED`), so several processes never hold the same row.
A row whose dispatcher died is leased again once its lease expires. Every attempt is logged in
`webhook_attempt` (status code, error, time). A 2xx answer delivers; anything else (another
status, a timeout, a refused connection) schedules the next attempt after an exponential backoff
(`webhook_backoff_s` doubling up to `webhook_backoff_max_s`, +0-25% jitter, or the receiver's
`Retry-After` if longer) until `webhook_max_attempts`, then the row is `failed`. Delivery is
at-least-once: the `X-Gradlab-Delivery` id is the same on every attempt, for deduplication.

**Signature.** Each attempt sends `X-Gradlab-Timestamp: <unix seconds>` and
`X-Gradlab-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>` with the
grader token's webhook secret; a receiver recomputes it and rejects old timestamps (replays).

**SSRF.** `check_callback_url` accepts only absolute http(s) URLs without credentials; at
delivery time every address the host resolves to must be public (not loopback, private,
link-local, multicast, reserved, ...) unless `webhook_allow_private`; the connection goes to the
checked address (no second DNS lookup to rebind) and redirects are never followed.
`address_allowed` is the one judge, used on URL literals and again on the resolved address where
the socket is opened. IPv6 forms that carry an IPv4 address (mapped, compatible, NAT64, 6to4,
Teredo) are judged by that IPv4 address too, and hosts that end in a number are read the way
URL parsers and `inet_aton` read them (`2130706433`, `0x7f.1`, `017700000001`: 127.0.0.1).
"""

import contextlib
import hashlib
import hmac
import http.client
import ipaddress
import json
import logging
import os
import random
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy import Engine, delete, text
from sqlmodel import Session

from gradlab.config import Settings
from gradlab.models import (
    GraderToken,
    IdempotencyKey,
    Submission,
    WebhookAttempt,
    WebhookDelivery,
)

log = logging.getLogger("gradlab.webhooks")
MAX_URL = 2048
MAX_ERROR_CHARS = 300
EVENT = "submission.finished"
USER_AGENT = "gradlab-webhooks/1"
HOUSEKEEPING_S = 600.0


class CallbackUrlError(ValueError):
    """A callback_url the API refuses (the message says why)."""


_IPV4_MAPPED = ipaddress.IPv6Network("::ffff:0:0/96")  # the kernel sends these as IPv4
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated (RFC 4291): ::127.0.0.1
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # well-known NAT64 prefix (RFC 6052)
# Never a callback's destination, listed here so that the verdict does not depend on the
# Python version's ipaddress tables (3.11 calls several of these global).
_NOT_GLOBAL_V6 = tuple(
    ipaddress.IPv6Network(network)
    for network in (
        "::/96",  # IPv4-compatible: reaches the embedded IPv4 address where routed at all
        "64:ff9b:1::/48",  # local-use NAT64 (RFC 8215): translates into private networks
        "100::/64",  # discard-only
        "2001::/32",  # Teredo: relays reach the embedded (obfuscated) IPv4 client
        "2001:db8::/32",  # documentation
        "2002::/16",  # 6to4 (deprecated, RFC 7526): relays reach the embedded IPv4 address
        "3fff::/20",  # documentation (RFC 9637)
        "fc00::/7",  # unique local
        "fe80::/10",  # link-local
        "fec0::/10",  # site-local (deprecated, but routed as local where configured)
    )
)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if (ip in _IPV4_COMPATIBLE and int(ip) > 1) or ip in _NAT64:  # not :: or ::1
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # the client; the server half is a relay
    return None


def _ip_allowed(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, *, allow_private: bool) -> bool:
    """One address on its own: unicast, and globally reachable unless private ones are allowed."""
    if ip.is_multicast or ip.is_unspecified:
        return False  # never a single receiver, private or not
    if allow_private:
        return True
    if not ip.is_global or ip.is_reserved or ip.is_loopback or ip.is_link_local or ip.is_private:
        return False
    return not (
        isinstance(ip, ipaddress.IPv6Address)
        and (ip.is_site_local or any(ip in network for network in _NOT_GLOBAL_V6))
    )


def address_allowed(address: str, *, allow_private: bool) -> bool:
    """Whether a callback may connect to `address` (an IP literal, zone id ignored); anything
    that is not an IP address is refused. The dispatcher judges resolved addresses with this
    too, right before it connects."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            # the packets end at (or are translated to) the embedded IPv4 address: judge it
            if not _ip_allowed(embedded, allow_private=allow_private):
                return False
            # mapped addresses and the NAT64 prefix are only IPv4 in another notation (the
            # NAT64 prefix itself is global, though Python counts it reserved); the other
            # forms are judged as IPv6 addresses too, which refuses them
            if ip in _IPV4_MAPPED or ip in _NAT64:
                return True
    return _ip_allowed(ip, allow_private=allow_private)


def _ipv4_number(part: str) -> int | None:
    """One dot-separated part of an IPv4 host as URL parsers and inet_aton read it: `0x` hex,
    leading-zero octal, or decimal; None when it is not a number."""
    if part[:2].lower() == "0x":
        digits, base = part[2:], 16
        if not digits:
            return 0  # "0x" alone is 0 to the WHATWG URL parser
    elif len(part) > 1 and part.startswith("0"):
        digits, base = part[1:], 8
    else:
        digits, base = part, 10
    if not digits or any(c not in "0123456789abcdef"[:base] for c in digits.lower()):
        return None
    return int(digits, base)


def _host_ipv4(host: str) -> ipaddress.IPv4Address | None:
    """The IPv4 address a host that ends in a number denotes (WHATWG URL rules: `127.1`,
    `2130706433`, `0x7f.1`, a trailing dot), None for a name; CallbackUrlError when it ends in a
    number but is no IPv4 address (libc might still read it as one: refuse, never guess)."""
    parts = host.split(".")
    if len(parts) > 1 and not parts[-1]:
        parts.pop()  # one trailing dot: 127.0.0.1. is 127.0.0.1
    last = parts[-1]
    if not last or (not last.isdigit() and _ipv4_number(last) is None):
        return None  # a name (its addresses are judged at delivery)
    numbers = [_ipv4_number(part) for part in parts]
    if len(numbers) > 4 or any(n is None for n in numbers):
        raise CallbackUrlError("callback_url's host ends in a number but is not an IPv4 address")
    *high, low = [n for n in numbers if n is not None]
    if any(n > 255 for n in high) or low >= 256 ** (4 - len(high)):
        raise CallbackUrlError("callback_url's host ends in a number but is not an IPv4 address")
    return ipaddress.IPv4Address(sum(n << 8 * (3 - i) for i, n in enumerate(high)) + low)


def _host_literal(netloc: str, host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address a URL's host is written as, in any notation; None for a name."""
    if netloc.startswith("["):  # credentials are refused before: the host comes first
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            raise CallbackUrlError("callback_url's brackets must hold an IPv6 address") from None
    return _host_ipv4(host)


def check_callback_url(url: str, *, allow_private: bool) -> str:
    """The URL if a grader may use it as a callback; CallbackUrlError otherwise. Names are not
    resolved here (delivery resolves and checks every address, see `deliver`)."""
    if len(url) > MAX_URL:
        raise CallbackUrlError(f"callback_url is longer than {MAX_URL} characters")
    if not url.isascii() or any(c.isspace() or not c.isprintable() for c in url):
        raise CallbackUrlError("callback_url must be ASCII without spaces (percent-encode it)")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise CallbackUrlError(f"callback_url is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise CallbackUrlError("callback_url must be an http:// or https:// URL")
    host = parts.hostname  # lower-cased by urlsplit
    if not host:
        raise CallbackUrlError("callback_url has no host")
    if parts.username is not None or parts.password is not None:
        raise CallbackUrlError("callback_url must not carry credentials")
    if port == 0:
        raise CallbackUrlError("callback_url has an invalid port")
    literal = _host_literal(parts.netloc, host)
    if literal is not None:
        if not address_allowed(str(literal), allow_private=allow_private):
            raise CallbackUrlError(
                "callback_url must point to a public address (not loopback, private or link-local)"
            )
        if not allow_private and "%" in host:
            # a zone id only means something for a non-global scope (RFC 6874)
            raise CallbackUrlError("callback_url must not carry an IPv6 zone id")
    elif not allow_private and _local_name(host):
        raise CallbackUrlError("callback_url must point to a public host")
    return url


def _local_name(host: str) -> bool:
    """Names that are local by definition (`localhost.` with its trailing dot included)."""
    name = host.rstrip(".")
    return name == "localhost" or name.endswith((".localhost", ".local", ".internal"))


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The `X-Gradlab-Signature` value: HMAC-SHA256 over `<timestamp>.<body>`."""
    message = str(timestamp).encode("ascii") + b"." + body
    return "sha256=" + hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def verify(
    secret: str, timestamp: str, body: bytes, signature: str, *, tolerance_s: int = 300
) -> bool:
    """What a receiver does (docs/api.md shows it standalone)."""
    if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, int(timestamp), body), signature)


def payload_for(submission: Submission) -> str:
    """The body: the finished submission as `GET /api/v1/submissions/{id}` shows it."""
    return json.dumps(
        {
            "event": EVENT,
            "submission": {
                "id": submission.id,
                "exercise": submission.exercise,
                "locale": submission.locale,
                "status": str(submission.status),
                "url": f"/api/v1/submissions/{submission.id}",
                "created_at": submission.created_at,
                "finished_at": submission.finished_at,
                "result": json.loads(submission.result_json) if submission.result_json else None,
            },
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def stage_delivery(*, session: Session, submission: Submission, now: float) -> None:
    """Add the outbox row of a finished submission (its transaction commits it)."""
    kind, _, ident = submission.owner.partition(":")
    if kind != "grader" or not ident.isdigit() or not submission.callback_url:
        return  # only grader tokens can set callbacks (the API enforces it)
    session.add(
        WebhookDelivery(
            submission_id=submission.id,
            grader_token_id=int(ident),
            url=submission.callback_url,
            payload=payload_for(submission),
            next_attempt_at=now,
            created_at=now,
        )
    )


@dataclass(frozen=True)
class ClaimedDelivery:
    id: str
    submission_id: str
    grader_token_id: int
    url: str
    payload: str
    attempt: int


@dataclass(frozen=True)
class Outcome:
    status_code: int | None
    error: str | None
    duration_s: float
    retry_after_s: float | None = None
    permanent: bool = False  # refused by policy: retrying would not help

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


_DUE = """
    SELECT id FROM webhook_delivery
    WHERE (status = 'pending' AND next_attempt_at <= :now)
       OR (status = 'delivering' AND lease_expires_at < :now AND attempts < :max)
    ORDER BY next_attempt_at LIMIT 1
"""


def claim(
    *, session: Session, dispatcher_id: str, lease_s: float, max_attempts: int
) -> ClaimedDelivery | None:
    """Lease the most overdue delivery to `dispatcher_id`, or None when none is due."""
    now = time.time()
    # a read first: idle dispatchers poll often and must not take SQLite's write lock for nothing
    due = session.execute(
        text(
            "SELECT 1 FROM webhook_delivery WHERE (status = 'pending' AND next_attempt_at <= :now)"
            " OR (status = 'delivering' AND lease_expires_at < :now) LIMIT 1"
        ),
        {"now": now},
    ).first()
    session.rollback()
    if due is None:
        return None
    session.execute(
        text(
            "UPDATE webhook_delivery SET status = 'failed', lease_owner = NULL, "
            "lease_expires_at = NULL, last_error = :reason "
            "WHERE status = 'delivering' AND lease_expires_at < :now AND attempts >= :max"
        ),
        {"now": now, "max": max_attempts, "reason": "dispatcher lost the delivery"},
    )
    skip_locked = " FOR UPDATE SKIP LOCKED" if session.bind.dialect.name == "postgresql" else ""
    row = session.execute(
        text(
            f"""
            UPDATE webhook_delivery SET status = 'delivering', lease_owner = :me,
                lease_expires_at = :expires, attempts = attempts + 1
            WHERE id = ({_DUE}{skip_locked})
              AND ((status = 'pending' AND next_attempt_at <= :now)
                OR (status = 'delivering' AND lease_expires_at < :now AND attempts < :max))
            RETURNING id, submission_id, grader_token_id, url, payload, attempts
            """
        ),
        {"me": dispatcher_id, "expires": now + lease_s, "now": now, "max": max_attempts},
    ).first()
    session.commit()
    if row is None:
        return None
    return ClaimedDelivery(
        id=row.id,
        submission_id=row.submission_id,
        grader_token_id=row.grader_token_id,
        url=row.url,
        payload=row.payload,
        attempt=row.attempts,
    )


class RefusedAddressError(OSError):
    """The dispatcher was about to connect to an address `address_allowed` refuses."""


def connect_checked(
    address: str, port: int, timeout: float | None, *, allow_private: bool
) -> socket.socket:
    """A TCP connection to `address`, judged by `address_allowed` where the socket is opened:
    whatever chose the address, nothing reaches a refused one."""
    if not address_allowed(address, allow_private=allow_private):
        raise RefusedAddressError(f"refused to connect to non-public address {address!r}")
    return socket.create_connection((address, port), timeout)


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to an address checked beforehand, not to a fresh DNS answer."""

    def __init__(
        self, host: str, port: int, *, address: str, timeout: float, allow_private: bool
    ) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address
        self._allow_private = allow_private

    def connect(self) -> None:
        self.sock = connect_checked(
            self._address, self.port, self.timeout, allow_private=self._allow_private
        )


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(
        self, host: str, port: int, *, address: str, timeout: float, allow_private: bool
    ) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address
        self._allow_private = allow_private

    def connect(self) -> None:
        sock = connect_checked(
            self._address, self.port, self.timeout, allow_private=self._allow_private
        )
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def post(
    url: str, body: bytes, headers: dict[str, str], *, timeout_s: float, allow_private: bool
) -> Outcome:
    """One POST: resolve, check every address, connect to the checked one, no redirects; the
    whole attempt is cut off after `timeout_s`."""
    started = time.monotonic()

    def done(
        status: int | None, error: str | None, retry_after: float | None = None, **kw: bool
    ) -> Outcome:
        return Outcome(status, error, round(time.monotonic() - started, 4), retry_after, **kw)

    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        return done(None, f"cannot resolve {host!r}: {exc}")
    addresses = [str(info[4][0]) for info in infos]
    refused = [a for a in addresses if not address_allowed(a, allow_private=allow_private)]
    if refused or not addresses:
        return done(None, f"{host!r} resolves to a non-public address {refused}", permanent=True)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn_class = _PinnedHTTPSConnection if parts.scheme == "https" else _PinnedHTTPConnection
    conn = conn_class(
        host, port, address=addresses[0], timeout=timeout_s, allow_private=allow_private
    )

    def cut_off() -> None:
        sock = conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    watchdog = threading.Timer(timeout_s, cut_off)
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        response.read(4096)
        return done(response.status, None, _retry_after(response.getheader("Retry-After")))
    except RefusedAddressError as exc:
        return done(None, str(exc)[:MAX_ERROR_CHARS], permanent=True)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        late = time.monotonic() - started >= timeout_s
        reason = f"timed out after {timeout_s:g} s" if late else f"{type(exc).__name__}: {exc}"
        return done(None, reason[:MAX_ERROR_CHARS])
    finally:
        watchdog.cancel()
        conn.close()


def deliver(*, session: Session, claimed: ClaimedDelivery, settings: Settings) -> Outcome:
    """One attempt of a leased delivery (no database write: `record` does that)."""
    token = session.get(GraderToken, claimed.grader_token_id)
    if token is None or token.revoked_at is not None:
        return Outcome(None, "the grader token was revoked", 0.0, permanent=True)
    try:
        check_callback_url(claimed.url, allow_private=settings.webhook_allow_private)
    except CallbackUrlError as exc:
        return Outcome(None, str(exc), 0.0, permanent=True)
    body = claimed.payload.encode("utf-8")
    timestamp = int(time.time())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Gradlab-Event": EVENT,
        "X-Gradlab-Delivery": claimed.id,
        "X-Gradlab-Attempt": str(claimed.attempt),
        "X-Gradlab-Timestamp": str(timestamp),
        "X-Gradlab-Signature": sign(token.webhook_secret, timestamp, body),
    }
    return post(
        claimed.url,
        body,
        headers,
        timeout_s=settings.webhook_timeout_s,
        allow_private=settings.webhook_allow_private,
    )


def backoff_s(attempt: int, settings: Settings) -> float:
    """The wait after failed attempt number `attempt` (1-based), before jitter."""
    return min(settings.webhook_backoff_s * 2 ** (attempt - 1), settings.webhook_backoff_max_s)


def record(
    *,
    session: Session,
    claimed: ClaimedDelivery,
    dispatcher_id: str,
    outcome: Outcome,
    settings: Settings,
    started_at: float,
) -> bool:
    """Log the attempt and move the delivery on; False when the lease was lost meanwhile."""
    now = time.time()
    if outcome.ok:
        status, next_at, error = "delivered", now, None
    elif outcome.permanent or claimed.attempt >= settings.webhook_max_attempts:
        status, next_at = "failed", now
        error = outcome.error or f"HTTP {outcome.status_code}"
    else:
        wait = backoff_s(claimed.attempt, settings) * random.uniform(1.0, 1.25)
        if outcome.retry_after_s is not None:
            wait = max(wait, min(outcome.retry_after_s, settings.webhook_backoff_max_s))
        status, next_at = "pending", now + wait
        error = outcome.error or f"HTTP {outcome.status_code}"
    delivered = ", delivered_at = :now" if status == "delivered" else ""
    updated = session.execute(
        text(
            f"UPDATE webhook_delivery SET status = '{status}', next_attempt_at = :next, "
            f"last_error = :error, lease_owner = NULL, lease_expires_at = NULL{delivered} "
            "WHERE id = :id AND lease_owner = :me AND status = 'delivering'"
        ),
        {"next": next_at, "error": error, "now": now, "id": claimed.id, "me": dispatcher_id},
    ).rowcount
    if updated != 1:
        session.rollback()
        return False
    session.add(
        WebhookAttempt(
            delivery_id=claimed.id,
            attempt=claimed.attempt,
            started_at=started_at,
            duration_s=outcome.duration_s,
            status_code=outcome.status_code,
            error=(outcome.error or "")[:MAX_ERROR_CHARS] or None,
        )
    )
    session.commit()
    level = logging.INFO if status == "delivered" else logging.WARNING
    log.log(
        level,
        "webhook %s: attempt %d %s (%s)",
        claimed.id,
        claimed.attempt,
        status,
        outcome.status_code or outcome.error,
    )
    return True


def purge_expired_keys(*, session: Session) -> None:
    session.execute(delete(IdempotencyKey).where(IdempotencyKey.expires_at <= time.time()))  # type: ignore[arg-type]
    session.commit()


class Dispatcher:
    """Delivers due webhooks on `threads` background threads until `stop()`."""

    def __init__(self, engine: Engine, settings: Settings, *, threads: int = 2) -> None:
        self.engine = engine
        self.settings = settings
        self.threads = threads
        self.id = f"{socket.gethostname()}:{os.getpid()}:wh-{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self._last_housekeeping = 0.0

    def run_once(self) -> bool:
        """Claim and attempt one due delivery; False when none was due."""
        with Session(self.engine) as session:
            claimed = claim(
                session=session,
                dispatcher_id=self.id,
                lease_s=self.settings.webhook_lease_s,
                max_attempts=self.settings.webhook_max_attempts,
            )
            if claimed is None:
                return False
            started_at = time.time()
            outcome = deliver(session=session, claimed=claimed, settings=self.settings)
            record(
                session=session,
                claimed=claimed,
                dispatcher_id=self.id,
                outcome=outcome,
                settings=self.settings,
                started_at=started_at,
            )
        return True

    def _loop(self, housekeeper: bool) -> None:
        while not self._stop.is_set():
            try:
                if housekeeper and time.time() - self._last_housekeeping > HOUSEKEEPING_S:
                    self._last_housekeeping = time.time()
                    with Session(self.engine) as session:
                        purge_expired_keys(session=session)
                busy = self.run_once()
            except Exception:  # the database is briefly unavailable, ...: never die
                log.exception("webhook dispatcher: retrying")
                busy = False
            if not busy:
                self._stop.wait(self.settings.webhook_poll_s)

    def start(self) -> "Dispatcher":
        for index in range(self.threads):
            thread = threading.Thread(
                target=self._loop, args=(index == 0,), name=f"webhooks-{index}", daemon=True
            )
            thread.start()
            self._workers.append(thread)
        return self

    def stop(self, timeout_s: float | None = None) -> None:
        self._stop.set()
        for thread in self._workers:
            thread.join(timeout_s)
