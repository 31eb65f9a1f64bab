"""Which addresses and interfaces this host has, and which one leads to a given peer.

Host names are a poor guide across machines: in containers they often do not resolve, and on
Debian a host's own name resolves to 127.0.1.1. collbench asks the kernel instead: the IPv4
addresses of every interface (``SIOCGIFADDR``), and the source address the routing table
picks for a destination (a UDP ``connect`` sends nothing), and the local end of the TCP
connections other hosts made to a port of this host (``/proc/net/tcp``): the address they
reached it at. Whether anything listens at an address is asked with a TCP connection, closed
at once.
"""

from __future__ import annotations

import errno
import fcntl
import socket
import struct
import sys
import time
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


_ESTABLISHED = "01"


def _proc_address(field: str) -> tuple:
    """(IPv4 address or None, port) of an ``ADDR:PORT`` field of /proc/net/tcp or tcp6; the
    address is in 32-bit words of host byte order; IPv6 other than IPv4-mapped gives None."""
    host, port = field.split(":")
    raw = bytes.fromhex(host)
    if sys.byteorder == "little":
        raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(raw) == 16 and raw[:12] == b"\0" * 10 + b"\xff\xff":
        raw = raw[12:]
    return (socket.inet_ntoa(raw) if len(raw) == 4 else None), int(port, 16)


def reached_at(port: int) -> list:
    """This host's non-loopback addresses that established TCP connections to its ``port``
    arrived at: where the hosts that connected reach this one."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as fh:
                rows = fh.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 4 or fields[3] != _ESTABLISHED:
                continue
            address, local_port = _proc_address(fields[1])
            if local_port == port and address and not is_loopback(address) and address not in found:
                found.append(address)
    return found


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
            raise RouteError(f"cannot reach {destination} from {socket.gethostname()}: "
                             f"{exc.strerror}") from None
        return s.getsockname()[0]


def await_listener(address: str, port: int, patience: float) -> None:
    """Return once something at ``address``:``port`` accepts a TCP connection, trying again for
    up to ``patience`` seconds (its owner may still be starting); RouteError naming what the
    last try met otherwise."""
    deadline = time.monotonic() + patience
    while True:
        try:
            with socket.create_connection((address, port),
                                          timeout=max(0.5, min(3.0, deadline - time.monotonic()))):
                return
        except OSError as exc:
            met = exc.strerror or str(exc)
        if time.monotonic() >= deadline:
            raise RouteError(f"nothing at {address}:{port} accepted a connection from "
                             f"{socket.gethostname()} within {patience:g} s ({met.lower()})")
        time.sleep(0.25)


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port free on ``address`` now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]
