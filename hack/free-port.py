#!/usr/bin/env python3
"""Prints a TCP port on 127.0.0.1 that nothing listens on, for a component to bind.

The port is taken from below the kernel's ephemeral range. Asking the kernel for port 0
would be simpler, but the kernel hands out that same range to every outgoing connection on
the machine. A port found free that way can be taken by some client's connection before the
component binds it ("address already in use").

An optional argument names a file of ports already handed out to this control plane. The
chosen port is appended to it and is not handed out twice.
"""
import random
import socket
import sys

LOWEST = 10000

try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_start = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    ephemeral_start = 32768

taken = set()
ledger = sys.argv[1] if len(sys.argv) > 1 else None
if ledger:
    try:
        with open(ledger) as f:
            taken = {int(line) for line in f if line.strip().isdigit()}
    except FileNotFoundError:
        pass

for _ in range(1000):
    port = random.randrange(LOWEST, max(ephemeral_start, LOWEST + 1000))
    if port in taken:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        continue
    finally:
        s.close()
    if ledger:
        with open(ledger, "a") as f:
            f.write(f"{port}\n")
    print(port)
    sys.exit(0)
sys.exit(f"no free port between {LOWEST} and {ephemeral_start}")
