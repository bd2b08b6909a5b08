#!/usr/bin/env python3
"""Checks a trainer's timeline (trace.json, --profile-steps): it parses as JSON in Chrome's trace event
format, the events of every (rank, track) nest, every rank 0..R-1 appears, each profiled step appears
on every rank, and within each step the phases sum to the step's time within 5%: the step's event on
every rank, and the step time the trainer logged (METRICS: its metrics.jsonl) on rank 0.
usage: check_trace.py TRACE RANKS FIRST_STEP LAST_STEP METRICS   (prints one line; exit 1 on a failure)"""
import json
import sys


def main():
    path, ranks, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    with open(sys.argv[5]) as f:
        logged_ms = {m["step"]: m["ms"] for m in map(json.loads, f) if "ms" in m}
    with open(path) as f:
        doc = json.load(f)
    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    named = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    if sorted(named) != list(range(ranks)):
        return f"processes {sorted(named)}, expected ranks 0..{ranks - 1}"
    by_track = {}
    for e in events:
        by_track.setdefault((e["pid"], e["tid"]), []).append(e)
    for (pid, tid), track in by_track.items():  # nesting: a stack of open intervals
        track.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for e in track:
            while open_ends and open_ends[-1] <= e["ts"] + 1e-3:
                open_ends.pop()
            end = e["ts"] + e["dur"]
            if open_ends and end > open_ends[-1] + 1e-3:
                return f"rank {pid} track {tid}: '{e['name']}' overlaps its neighbour without nesting"
            open_ends.append(end)
    worst = 0.0
    for rank in range(ranks):
        for step in range(first, last + 1):
            steps = [e for e in events if e["pid"] == rank and e["name"] == f"step {step}"]
            if len(steps) != 1:
                return f"rank {rank}: {len(steps)} events for step {step}"
            s = steps[0]
            inside = [e for e in events if e["pid"] == rank and e["cat"] == "phase" and e["name"] != "checkpoint"
                      and e["ts"] >= s["ts"] - 1e-3 and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1e-3]
            total = sum(e["dur"] for e in inside)
            for what, step_us in [("its event's", s["dur"])] + ([("the logged", 1000 * logged_ms[step])] if rank == 0 else []):
                gap = abs(total - step_us) / step_us
                worst = max(worst, gap)
                if gap > 0.05:
                    return (f"rank {rank} step {step}: phases sum to {total / 1000:.2f} ms of {what} "
                            f"{step_us / 1000:.2f} ms")
    layers = sum(1 for e in events if e["cat"] == "layer")
    print(f"trace: {len(events)} events, {ranks} ranks, phases within {100 * worst:.2f}% of each step's time, "
          f"{layers} layer passes")
    return None


if __name__ == "__main__":
    problem = main()
    if problem:
        print("trace: " + problem)
        sys.exit(1)
