"""IP-address checks and free-port reservation for the servers and process groups this package starts.

Rendezvous addresses come from Ray (``ray.util.get_node_ip_address``) and may be IPv6 on some clusters; sockets for
them must be opened with ``AF_INET6``, so callers ask here which family an address is.
"""

from __future__ import annotations

import ipaddress
import socket

__all__ = ["is_ipv4", "is_ipv6", "is_valid_ipv6_address", "get_free_port"]


def is_ipv4(ip_str: str) -> bool:
    """Whether ``ip_str`` is an IPv4 address literal."""
    try:
        ipaddress.IPv4Address(ip_str)
    except ValueError:
        return False
    return True


def is_ipv6(ip_str: str) -> bool:
    """Whether ``ip_str`` is an IPv6 address literal (``::1``, ``fe80::...``)."""
    try:
        ipaddress.IPv6Address(ip_str)
    except ValueError:
        return False
    return True


def is_valid_ipv6_address(address: str) -> bool:
    """verl's name for :func:`is_ipv6`."""
    return is_ipv6(address)


def get_free_port(address: str, with_alive_sock: bool = False) -> tuple[int, socket.socket | None]:
    """A TCP port free on ``address``, as ``(port, socket)``.

    By default the probing socket is closed before returning (``socket`` is None), so another process could take
    the port before the caller binds it. With ``with_alive_sock`` the bound socket is returned open and holds the
    port until the caller closes it, right before the real server binds.
    """
    family = socket.AF_INET6 if is_ipv6(address) else socket.AF_INET
    sock = socket.socket(family=family, type=socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, 0))
    except OSError as err:
        sock.close()
        raise OSError(f"cannot bind a free port on address {address!r}: {err}") from err
    port = sock.getsockname()[1]
    if with_alive_sock:
        return port, sock
    sock.close()
    return port, None
