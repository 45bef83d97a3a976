"""Who is on the other end of a request, as the limits count them."""

import ipaddress

from fastapi import Request


def client_address(request: Request) -> str:
    """Who the rate limits count: the peer address of the connection, which is the client's
    own unless `gradlab serve` was told to trust a proxy (GRADLAB_FORWARDED_ALLOW_IPS: only
    then does uvicorn replace it with X-Forwarded-For). An IPv6 address counts as its /64,
    the block one subscriber gets (and can pick any address of)."""
    host = request.client.host if request.client else "unknown"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)
