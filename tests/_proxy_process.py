"""``python -m hpo.proxy`` as a real subprocess: a free port, started, listening (tests of the proxy and of its client)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from conftest import ROOT

PROXY = [sys.executable, "-m", "hpo.proxy"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_proxy(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([*PROXY, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_listening(proc: subprocess.Popen[str], port: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the proxy exited with {proc.returncode} before listening:\n{out}\n{err}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    pytest.fail(f"the proxy did not listen on port {port} within {timeout} s")


def serve(url: str, port: int) -> subprocess.Popen[str]:
    """A proxy serving ``url`` on 127.0.0.1:``port``, listening."""
    proc = start_proxy("--storage", url, "--port", str(port))
    wait_listening(proc, port)
    return proc


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate()
