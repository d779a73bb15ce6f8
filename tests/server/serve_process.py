"""Shared by the server benchmark scripts: starts `hypura serve` on a free port and names
the model it serves."""
import json
import re
import subprocess
import threading
import urllib.request


def start_serve(hypura, model, extra_args=(), log=None, preexec_fn=None):
    """(process, port) of `hypura serve MODEL --port 0 EXTRA_ARGS`, once it listens; its
    output is drained by a thread so the pipe never fills, into the list `log` if given.
    preexec_fn runs in the child before the server starts (e.g. entering a cgroup)."""
    proc = subprocess.Popen([hypura, "serve", model, "--port", "0", *extra_args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            errors="replace", preexec_fn=preexec_fn)
    keep = log.append if log is not None else (lambda line: None)
    for line in proc.stdout:
        keep(line)
        m = re.search(r"on http://[^:]+:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [keep(line) for line in proc.stdout], daemon=True).start()
            return proc, int(m.group(1))
    raise RuntimeError("server did not start:\n" + "".join(log or []))


def served_model(port):
    """The name the server answers to (the file stem, :latest)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/tags", timeout=30) as resp:
        return json.load(resp)["models"][0]["name"]
