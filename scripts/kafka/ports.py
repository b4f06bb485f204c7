#!/usr/bin/env python3
"""Small helpers for scripts/services (standard library only).

  ports.py ports N                 print N distinct free TCP ports on 127.0.0.1
  ports.py uuid                    print a random Kafka-style (base64url) UUID

The broker's readiness probe is the project's own librdkafka tool
(`qsp-devtool probe`), not this file.
"""
import base64
import os
import socket
import sys


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


def main(argv):
    if len(argv) >= 2 and argv[1] == "ports":
        print(" ".join(str(p) for p in free_ports(int(argv[2]) if len(argv) > 2 else 1)))
        return 0
    if len(argv) == 2 and argv[1] == "uuid":
        print(kafka_uuid())
        return 0
    sys.stderr.write(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
