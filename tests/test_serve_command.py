"""``textkit-serve`` as a process: flags refused before loading, and SIGTERM's drain (new
requests refused, the one in flight finished, exit status 0)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pytest
from subprocesses import ROOT, cpu_env

pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

CHAT = ROOT / "tests" / "fixtures" / "decoders" / "qwen2_chat"


def _serve(*flags: str, **options) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "textkit.cli.serve", *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=cpu_env(1), cwd=ROOT, **options)


def test_bad_flags_are_refused_in_one_line():
    for flags, expected in [(["--pretrained", "/no/such/dir"], "--pretrained /no/such/dir: "
                                                                "no such directory"),
                            (["--pretrained", str(CHAT), "--batch-size", "0"], "--batch-size"),
                            (["--pretrained", str(CHAT), "--context", "9999"],
                             "--context 9999: the model takes 512 positions")]:
        process = _serve(*flags)
        out, _ = process.communicate(timeout=120)
        assert process.returncode == 2, out
        assert expected in out and "Traceback" not in out


@pytest.mark.slow
def test_sigterm_finishes_the_request_in_flight_then_exits_0():
    process = _serve("--pretrained", str(CHAT), "--port", "0", "--context", "64",
                     "--batch-size", "2")
    url = None
    lines = []
    for line in process.stdout:
        lines.append(line)
        found = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
        if found:
            url = found.group(1)
            break
    assert url, "".join(lines)
    with httpx.stream("POST", f"{url}/v1/completions", timeout=60,
                      json={"prompt": "ok", "max_tokens": 60, "temperature": 0,
                            "stream": True}) as response:
        events = response.iter_lines()
        assert next(events).startswith("data: ")
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(httpx.HTTPError):      # the port is closed to new requests
            httpx.post(f"{url}/v1/completions", json={"prompt": "a"}, timeout=5)
        rest = [line for line in events if line.startswith("data: {")]
    assert json.loads(rest[-2][6:])["choices"][0]["finish_reason"] in ("stop", "length")
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0, "".join(lines) + out
    assert '"POST /v1/completions" 200' in out         # the request's log line
