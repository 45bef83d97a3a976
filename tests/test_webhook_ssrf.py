"""Callback SSRF: every notation of a non-public address is refused, by the URL check and by the
dispatcher where it opens the socket; public addresses still pass. No DNS, no network: literal
addresses only, and a listener on 127.0.0.1 to see that nothing connects."""

import socket
from collections.abc import Iterator

import pytest

from gradlab import webhooks

NOT_PUBLIC = "must point to a public"

# (url, what it really is)
REFUSED_URLS = [
    # IPv4 in the notations URL parsers and inet_aton accept
    ("http://2130706433/", "127.0.0.1 as one decimal number"),
    ("http://0x7f.1/", "127.0.0.1, hex and two parts"),
    ("http://017700000001/", "127.0.0.1 as one octal number"),
    ("http://0x7F000001:8080/", "127.0.0.1 as one hex number, upper case"),
    ("http://127.1/", "127.0.0.1, two parts"),
    ("http://0177.0.0.01/", "127.0.0.1, octal parts"),
    ("http://127.0.0.1./", "trailing dot"),
    ("http://0/", "0.0.0.0"),
    ("http://3232235521/", "192.168.0.1"),
    ("http://0xa9fea9fe/latest/meta-data/", "169.254.169.254, cloud metadata"),
    ("http://169.254.169.254./", "cloud metadata, trailing dot"),
    ("http://10.0.0.1/", "private"),
    ("http://100.64.0.1/", "shared address space (CGNAT)"),
    ("http://192.0.2.1/", "documentation (TEST-NET-1)"),
    ("http://198.18.0.1/", "benchmarking"),
    ("http://224.0.0.1/", "multicast"),
    ("http://240.0.0.1/", "reserved"),
    ("http://255.255.255.255/", "broadcast"),
    # IPv6 forms that embed an IPv4 address
    ("http://[::127.0.0.1]/", "IPv4-compatible loopback"),
    ("http://[::7f00:1]/", "IPv4-compatible loopback, hex"),
    ("http://[::8.8.8.8]/", "IPv4-compatible (deprecated), even of a public address"),
    ("http://[::ffff:127.0.0.1]/", "IPv4-mapped loopback"),
    ("http://[::FFFF:7F00:1]/", "IPv4-mapped loopback, hex, upper case"),
    ("http://[::ffff:169.254.169.254]/", "IPv4-mapped metadata"),
    ("http://[64:ff9b::7f00:1]/", "NAT64 of loopback"),
    ("http://[64:ff9b::127.0.0.1]/", "NAT64 of loopback, dotted"),
    ("http://[64:ff9b::a9fe:a9fe]/", "NAT64 of cloud metadata"),
    ("http://[64:ff9b::a00:1]/", "NAT64 of 10.0.0.1"),
    ("http://[64:ff9b:1::808:808]/", "local-use NAT64 (RFC 8215)"),
    ("http://[2002:7f00:1::]/", "6to4 of loopback"),
    ("http://[2002:808:808::1]/", "6to4 (deprecated) of a public address"),
    ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", "Teredo, client 127.0.0.1"),
    # other IPv6
    ("http://[::1]/", "loopback"),
    ("http://[::]/", "unspecified"),
    ("http://[fe80::1%25eth0]/", "link-local with zone id"),
    ("http://[::1%25lo]/", "loopback with zone id"),
    ("http://[2606:4700:4700::1111%25eth0]/", "zone id on a global address"),
    ("http://[fec0::1]/", "site-local (deprecated)"),
    ("http://[fc00::1]/", "unique local"),
    ("http://[fd12:3456:789a::1]/", "unique local"),
    ("http://[2001:db8::1]/", "documentation"),
    ("http://[3fff::1]/", "documentation (RFC 9637)"),
    ("http://[100::1]/", "discard-only"),
    ("http://[ff02::1]/", "multicast"),
    ("http://[v1.x]/", "IPvFuture in brackets"),
    # local names
    ("http://LOCALHOST/", "localhost, upper case"),
    ("http://localhost./", "localhost, trailing dot"),
    ("http://api.localhost./", "a .localhost name, trailing dot"),
    ("http://Metadata.Google.Internal./", ".internal, mixed case, trailing dot"),
    ("http://printer.local/", "mDNS"),
    # ends in a number but no IPv4 address: libc might read it some way, so never guess
    ("http://1.2.3.4.5/", "five parts"),
    ("http://08.1/", "invalid octal"),
    ("http://256.1.1.1/", "part over 255"),
    ("http://example.123/", "a name that ends in a number"),
]

ACCEPTED_URLS = [
    "https://lms.example.edu/hooks/gradlab?x=1",
    "https://LMS.Example.EDU./hooks",
    "http://93.184.216.34:8080/h",
    "http://8.8.8.8/",
    "http://134744072/",  # 8.8.8.8 as one number: read, judged public
    "http://[2606:4700:4700::1111]/",
    "http://[::ffff:8.8.8.8]/",  # IPv4-mapped public: plain IPv4 on the wire
    "http://[64:ff9b::8.8.8.8]/",  # NAT64 of a public address (IPv6-only hosts with DNS64)
]


@pytest.mark.parametrize(("url", "what"), REFUSED_URLS, ids=[u for u, _ in REFUSED_URLS])
def test_callback_url_refuses_every_notation_of_a_non_public_address(url: str, what: str) -> None:
    with pytest.raises(webhooks.CallbackUrlError):
        webhooks.check_callback_url(url, allow_private=False)


@pytest.mark.parametrize(
    "url", ["http://2130706433/", "http://[::127.0.0.1]/", "http://[64:ff9b::7f00:1]/"]
)
def test_refusal_says_the_address_is_not_public(url: str) -> None:
    with pytest.raises(webhooks.CallbackUrlError, match=NOT_PUBLIC):
        webhooks.check_callback_url(url, allow_private=False)


@pytest.mark.parametrize("url", ACCEPTED_URLS)
def test_callback_url_accepts_public_addresses(url: str) -> None:
    assert webhooks.check_callback_url(url, allow_private=False) == url


REFUSED_ADDRESSES = [
    "127.0.0.1",
    "0.0.0.0",
    "10.1.2.3",
    "169.254.169.254",
    "224.0.0.251",
    "::1",
    "::",
    "::127.0.0.1",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "64:ff9b::7f00:1",
    "64:ff9b::c0a8:1",
    "64:ff9b:1::808:808",
    "2002:7f00:1::1",
    "2002:808:808::1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",
    "fe80::1%eth0",
    "fec0::1",
    "fd00::1",
    "2001:db8::1",
    "ff02::1",
    "localhost",  # not an address at all: fail closed
    "",
]

ALLOWED_ADDRESSES = [
    "8.8.8.8",
    "93.184.216.34",
    "2606:4700:4700::1111",
    "::ffff:8.8.8.8",
    "64:ff9b::808:808",
]


@pytest.mark.parametrize("address", REFUSED_ADDRESSES)
def test_address_checker_refuses_non_public_addresses(address: str) -> None:
    assert not webhooks.address_allowed(address, allow_private=False)


@pytest.mark.parametrize("address", ALLOWED_ADDRESSES)
def test_address_checker_allows_public_addresses(address: str) -> None:
    assert webhooks.address_allowed(address, allow_private=False)


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "::1", "::127.0.0.1", "10.0.0.1", "fe80::1%eth0", "fd00::1"]
)
def test_allow_private_admits_private_unicast(address: str) -> None:
    assert webhooks.address_allowed(address, allow_private=True)


@pytest.mark.parametrize(
    "address",
    [
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "ff02::1",
        "::ffff:224.0.0.1",
        "64:ff9b::e000:1",
        "::ffff:0.0.0.0",
    ],
)
def test_allow_private_still_refuses_multicast_and_unspecified(address: str) -> None:
    assert not webhooks.address_allowed(address, allow_private=True)


def test_allow_private_keeps_loopback_callbacks_working() -> None:
    for url in ("http://127.0.0.1:9/", "http://[::127.0.0.1]:9/", "http://localhost:9/"):
        assert webhooks.check_callback_url(url, allow_private=True) == url


# the dispatcher's connect path


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP listener on 127.0.0.1 that records whether anything connected."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.3)
    yield server
    server.close()


def _connected(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except TimeoutError:
        return False
    conn.close()
    return True


def test_connect_path_reaches_the_listener_when_allowed(listener: socket.socket) -> None:
    """The control for the tests below: an allowed connection is seen."""
    port = listener.getsockname()[1]
    webhooks.connect_checked("127.0.0.1", port, 1.0, allow_private=True).close()
    assert _connected(listener)


@pytest.mark.parametrize(
    "address", ["127.0.0.1", "::ffff:127.0.0.1", "::127.0.0.1", "64:ff9b::7f00:1"]
)
def test_connect_path_refuses_before_opening_a_socket(
    listener: socket.socket, address: str
) -> None:
    port = listener.getsockname()[1]
    with pytest.raises(webhooks.RefusedAddressError):
        webhooks.connect_checked(address, port, 1.0, allow_private=False)
    assert not _connected(listener)


@pytest.mark.parametrize("host", ["[::ffff:127.0.0.1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]"])
def test_post_refuses_embedded_loopback_for_good(listener: socket.socket, host: str) -> None:
    """`post` resolves the literal and judges what it got: a permanent failure, no connection."""
    port = listener.getsockname()[1]
    outcome = webhooks.post(f"http://{host}:{port}/", b"{}", {}, timeout_s=1, allow_private=False)
    assert outcome.permanent and outcome.status_code is None
    assert "non-public" in (outcome.error or "")
    assert not _connected(listener)


def test_pinned_connection_checks_the_address_it_connects_to(listener: socket.socket) -> None:
    """Even an address nobody checked before is judged where the socket is opened."""
    port = listener.getsockname()[1]
    conn = webhooks._PinnedHTTPConnection(
        "lms.example.edu", port, address="127.0.0.1", timeout=1.0, allow_private=False
    )
    with pytest.raises(webhooks.RefusedAddressError):
        conn.request("POST", "/", body=b"{}")
    conn.close()
    assert not _connected(listener)
