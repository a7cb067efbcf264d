"""Runs a C-ABI benchmark binary (bench/gpu/bench_c_abi, bench_router_c_abi) and collects the
JSON line it prints per measured shape. Shared by bench_cuda.py and bench_router_cuda.py, which
pass the binary their own shape lists so each list lives in one place."""

import json
import subprocess


def run_json_lines(binary, specs, key_fields, timeout):
    """Runs `binary specs...`; returns {tuple(line[f] for f in key_fields): line}. Its stderr
    (mismatches, failures) passes through; a failed or timed-out run still yields the lines it
    printed, and its status is reported on stdout."""
    try:
        done = subprocess.run([binary, *specs], stdout=subprocess.PIPE, text=True, timeout=timeout)
        output, status = done.stdout, done.returncode
    except subprocess.TimeoutExpired as expired:
        output, status = expired.stdout or "", f"timeout after {timeout} s"
        output = output.decode() if isinstance(output, bytes) else output
    except OSError as error:  # missing or not executable: the Python columns still run
        output, status = "", f"{type(error).__name__}: {error}"
    if status != 0:
        print(f"# {binary}: exit {status}", flush=True)
    lines = {}
    for line in output.splitlines():
        record = json.loads(line)
        lines[tuple(record[f] for f in key_fields)] = record
    return lines
