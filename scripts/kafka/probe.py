#!/usr/bin/env python3
"""Small helpers for scripts/services (standard library only).

  probe.py ports N                 print N distinct free TCP ports on 127.0.0.1
  probe.py uuid                    print a random Kafka-style (base64url) UUID
  probe.py kafka HOST:PORT [--coordinators]
                                   exit 0 if the broker answers ApiVersions and a
                                   Metadata request listing at least one broker;
                                   with --coordinators also require FindCoordinator
                                   to succeed for a consumer group and for a
                                   transactional id (this makes the broker create
                                   __consumer_offsets and __transaction_state, so
                                   the first test does not pay for it).
                                   Prints one line saying what is missing otherwise.

The Kafka requests use only non-flexible protocol versions, picked from the
ranges the broker advertises in its ApiVersions v0 response.
"""
import base64
import os
import socket
import struct
import sys

API_METADATA, API_FIND_COORDINATOR, API_VERSIONS = 3, 10, 18


def free_ports(n):
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def kafka_uuid():
    # Same shape as org.apache.kafka.common.Uuid.randomUuid().toString():
    # 16 random bytes, base64url without padding, never starting with '-'
    # and never the reserved all-zero / METADATA_TOPIC ids.
    while True:
        raw = os.urandom(16)
        if raw in (bytes(16), bytes(15) + b"\x01"):
            continue
        s = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        if not s.startswith("-"):
            return s


class Conn:
    def __init__(self, host, port, timeout=3.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.corr = 0

    def close(self):
        self.sock.close()

    def _recv(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return buf

    def call(self, api_key, version, body):
        self.corr += 1
        client = b"qsp-services-probe"
        header = struct.pack(">hhih", api_key, version, self.corr, len(client)) + client
        msg = header + body
        self.sock.sendall(struct.pack(">i", len(msg)) + msg)
        size = struct.unpack(">i", self._recv(4))[0]
        resp = self._recv(size)
        corr = struct.unpack(">i", resp[:4])[0]
        if corr != self.corr:
            raise ValueError("correlation id mismatch")
        return Reader(resp[4:])


class Reader:
    def __init__(self, data):
        self.d, self.o = data, 0

    def _take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.o)
        self.o += struct.calcsize(fmt)
        return v[0]

    def i8(self):
        return self._take(">b")

    def i16(self):
        return self._take(">h")

    def i32(self):
        return self._take(">i")

    def string(self):
        n = self.i16()
        if n < 0:
            return None
        s = self.d[self.o:self.o + n].decode()
        self.o += n
        return s


def kstr(s):
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def pick(ranges, api, lo, hi):
    """Highest version in [lo, hi] the broker supports, or None."""
    if api not in ranges:
        return None
    bmin, bmax = ranges[api]
    v = min(bmax, hi)
    return v if v >= max(bmin, lo) else None


def check_kafka(addr, coordinators):
    host, _, port = addr.rpartition(":")
    c = Conn(host, int(port))
    try:
        r = c.call(API_VERSIONS, 0, b"")
        err = r.i16()
        if err != 0:
            return "ApiVersions error %d" % err
        ranges = {}
        for _ in range(r.i32()):
            k, lo, hi = r.i16(), r.i16(), r.i16()
            ranges[k] = (lo, hi)

        # Metadata v4..v8 (v9+ is flexible): topics=[] -> brokers only.
        v = pick(ranges, API_METADATA, 4, 8)
        if v is None:
            return "no usable Metadata version in %r" % (ranges.get(API_METADATA),)
        body = struct.pack(">i", 0) + b"\x00"          # topics: [], allow_auto_create: false
        if v >= 8:
            body += b"\x00\x00"                         # include_*_authorized_operations
        r = c.call(API_METADATA, v, body)
        r.i32()                                         # throttle_time_ms
        nbrokers = r.i32()
        if nbrokers < 1:
            return "metadata lists no broker yet"

        if coordinators:
            # FindCoordinator v1..v2 (v3 is flexible): key, key_type.
            v = pick(ranges, API_FIND_COORDINATOR, 1, 2)
            if v is None:
                return "no usable FindCoordinator version"
            for key_type, key, what in ((0, "qsp-services-probe", "group"),
                                        (1, "qsp-services-probe", "transaction")):
                r = c.call(API_FIND_COORDINATOR, v, kstr(key) + struct.pack(">b", key_type))
                r.i32()                                 # throttle_time_ms
                err = r.i16()
                if err != 0:
                    return "%s coordinator not available yet (error %d)" % (what, err)
        return None
    finally:
        c.close()


def main(argv):
    if len(argv) >= 2 and argv[1] == "ports":
        print(" ".join(str(p) for p in free_ports(int(argv[2]) if len(argv) > 2 else 1)))
        return 0
    if len(argv) == 2 and argv[1] == "uuid":
        print(kafka_uuid())
        return 0
    if len(argv) >= 3 and argv[1] == "kafka":
        try:
            why = check_kafka(argv[2], "--coordinators" in argv[3:])
        except (OSError, ValueError, struct.error) as e:
            why = "%s: %s" % (type(e).__name__, e)
        if why:
            print(why)
            return 1
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
