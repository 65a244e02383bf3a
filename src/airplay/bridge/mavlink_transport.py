"""MAVLink 2 frames over UDP, TCP or serial (:class:`MavlinkLink`): the transport under
:class:`airplay.bridge.mavlink_link.Autopilot` and ``airplay vehicle``. Connection strings are
described in :mod:`airplay.bridge.mavlink_link`. No rclpy."""

from __future__ import annotations

import logging
import select
import socket
import threading
import time

from pymavlink.dialects.v20 import common as mavlink

log = logging.getLogger("airplay.mavlink")

UDP_MAX_BYTES = 65535

class _Writer:
    """The ``file`` of the pymavlink encoder: hands packed frames to the link."""

    def __init__(self, link: "MavlinkLink") -> None:
        self.link = link

    def write(self, buf: bytes) -> None:
        self.link._write(bytes(buf))


class MavlinkLink:
    """Raw MAVLink 2 frames over UDP (own socket), TCP or serial (pymavlink's mavutil files).

    ``mav`` is the pymavlink encoder (``link.mav.heartbeat_send(...)``), stamped with
    ``source_system``/``source_component``. :meth:`receive` returns the good messages that
    arrived (each with ``._link_address`` for UDP). Thread-safe: sending and receiving lock.
    """

    def __init__(self, url: str, source_system: int, source_component: int) -> None:
        self.url = url
        self._lock = threading.RLock()
        self._sock = None
        self._file = None
        self.peer: tuple[str, int] | None = None
        self.bad_frames = 0
        kind, _, rest = url.partition(":")
        self.kind = kind                               # udp, udpin, udpout, tcp, serial or a device path
        self.listening = kind in ("udp", "udpin")  # UDP answering whoever sends: the peer is learnt
        if kind in ("udp", "udpin", "udpout"):
            host, port = host_port(url, rest)
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            if kind == "udpout":
                self._sock.bind(("127.0.0.1" if host in ("127.0.0.1", "localhost") else "0.0.0.0", 0))
                self.peer = (socket.gethostbyname(host), port)
            else:
                try:
                    self._sock.bind((host, port))
                except OSError as exc:
                    self._sock.close()
                    raise ValueError(f"connection {url!r}: cannot listen on {host}:{port}: {exc}") from None
            self._sock.setblocking(False)
            self.stream = False
        elif kind in ("tcp", "serial") or url.startswith("/dev/") or url.upper().startswith("COM"):
            import os

            os.environ.setdefault("MAVLINK20", "1")
            from pymavlink import mavutil

            if kind == "tcp":
                host_port(url, rest)
                device, baud = url, 115200
            else:
                device = rest if kind == "serial" else url
                device, _, baud_text = device.partition(":")
                baud = int(baud_text) if baud_text else 921600
            try:
                self._file = mavutil.mavlink_connection(device, baud=baud, autoreconnect=True)
            except Exception as exc:  # serial.SerialException, OSError, ...
                raise ValueError(f"connection {url!r}: {exc}") from None
            self.stream = True
        else:
            raise ValueError(f"connection {url!r}: expected udpin:HOST:PORT, udpout:HOST:PORT, udp:HOST:PORT, "
                             "tcp:HOST:PORT or serial:DEVICE[:BAUD]")
        self.mav = mavlink.MAVLink(_Writer(self), srcSystem=source_system, srcComponent=source_component)
        self._parser = self._new_parser()

    @staticmethod
    def _new_parser():
        # ardupilotmega is a superset of common: ArduPilot's own messages (EKF_STATUS_REPORT) parse too
        from pymavlink.dialects.v20 import ardupilotmega

        parser = ardupilotmega.MAVLink(None)
        parser.robust_parsing = True
        return parser

    @property
    def local_port(self) -> int | None:
        """The UDP port this link's socket is bound to (None for TCP/serial)."""
        return None if self._sock is None else self._sock.getsockname()[1]

    def fileno(self) -> int:
        return self._sock.fileno() if self._sock is not None else self._file.fd

    def _write(self, buf: bytes) -> None:
        with self._lock:
            if self._sock is not None:
                if self.peer is None:
                    return  # nobody to talk to yet (udpin before the first autopilot heartbeat)
                try:
                    self._sock.sendto(buf, self.peer)
                except OSError as exc:
                    log.debug("send to %s failed: %s", self.peer, exc)
            else:
                self._file.write(buf)

    def receive(self, timeout_s: float = 0.0) -> list:
        """Good messages that arrived within ``timeout_s`` (0: only those already there)."""
        if self._sock is not None:
            try:
                ready, _, _ = select.select([self._sock], [], [], max(0.0, timeout_s))
            except (OSError, ValueError):
                return []
            out = []
            while ready:
                try:
                    data, address = self._sock.recvfrom(UDP_MAX_BYTES)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:  # ICMP port unreachable from a peer that went away
                    continue
                for msg in self._parse(data, reset=True):
                    msg._link_address = address
                    out.append(msg)
            return out
        if timeout_s > 0:
            try:
                select.select([self._file.fd], [], [], timeout_s)
            except (OSError, ValueError, TypeError):
                time.sleep(min(timeout_s, 0.01))
        data = self._file.recv(4096)
        return self._parse(data if isinstance(data, (bytes, bytearray)) else bytes(data, "latin-1"), reset=False)

    def _parse(self, data: bytes, reset: bool) -> list:
        if not data:
            return []
        parser = self._parser
        if reset:
            parser.buf, parser.buf_index = bytearray(), 0
            parser.expected_length, parser.have_prefix_error = mavlink.HEADER_LEN_V1 + 2, False
        try:
            msgs = parser.parse_buffer(data) or []
        except Exception as exc:  # MAVError and struct errors from a corrupt frame
            log.debug("unparseable MAVLink data: %s", exc)
            self.bad_frames += 1
            self._parser = self._new_parser()
            return []
        good = []
        for msg in msgs:
            if msg.get_type() in ("BAD_DATA", "UNKNOWN") or msg.get_type().startswith("UNKNOWN"):
                self.bad_frames += 1
            else:
                good.append(msg)
        return good

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
            if self._file is not None:
                self._file.close()


def host_port(url: str, rest: str) -> tuple[str, int]:
    host, _, port = rest.rpartition(":")
    try:
        port_number = int(port)
    except ValueError:
        port_number = -1
    if not host or not 0 <= port_number <= 65535:
        raise ValueError(f"connection {url!r}: expected HOST:PORT after the scheme")
    return host, port_number
