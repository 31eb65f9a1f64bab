"""Which addresses and interfaces this host has, and which one leads to a given peer.

Host names are a poor guide across machines: in containers they often do not resolve, and on
Debian a host's own name resolves to 127.0.1.1. collbench asks the kernel instead: the IPv4
addresses of every interface (``SIOCGIFADDR``), and the source address the routing table
picks for a destination (a UDP ``connect`` sends nothing).
"""

from __future__ import annotations

import errno
import fcntl
import socket
import struct
from typing import Optional

_SIOCGIFADDR = 0x8915


def interface_addresses() -> list:
    """(interface, IPv4 address) for every interface that has one, loopback included."""
    found = []
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return found
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in names:
            try:
                request = struct.pack("256s", name.encode()[:15])
                reply = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, request)
            except OSError:
                continue          # down, or no IPv4 address
            found.append((name, socket.inet_ntoa(reply[20:24])))
    return found


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address == "::1"


def outward_addresses() -> list:
    """This host's IPv4 addresses other ranks may reach it at: every one but loopback."""
    return [address for _, address in interface_addresses() if not is_loopback(address)]


def interface_of(address: str) -> Optional[str]:
    """The interface that holds ``address``; loopback addresses belong to the loopback one."""
    pairs = interface_addresses()
    for name, held in pairs:
        if held == address:
            return name
    if is_loopback(address):
        for name, held in pairs:
            if is_loopback(held):
                return name
    return None


class RouteError(Exception):
    """No way to the peer: its name does not resolve, or no route leads there."""


def resolve(host: str) -> str:
    """The IPv4 address of ``host`` (a name or an address)."""
    try:
        return socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    except (socket.gaierror, UnicodeError, IndexError) as exc:
        raise RouteError(f"{host!r} does not resolve on {socket.gethostname()} ({exc})") from None


def source_address(destination: str, port: int = 9) -> str:
    """The local address the kernel would send from to reach ``destination``."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect((destination, port))
        except OSError as exc:
            if exc.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
                raise RouteError(f"no route from {socket.gethostname()} to {destination}") from None
            raise RouteError(f"cannot reach {destination} from {socket.gethostname()}: {exc.strerror}") from None
        return s.getsockname()[0]


def interface_towards(host: str) -> Optional[str]:
    """The interface whose address the kernel uses to reach ``host``; None if unknown."""
    return interface_of(source_address(resolve(host)))
