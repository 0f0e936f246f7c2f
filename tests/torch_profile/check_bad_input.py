#!/usr/bin/python3
"""Bad input to the PyTorch collector is refused before any step runs, with a message
that says what is wrong; statistics with NaN name the module, the operand and the step;
and `pgq recipe` refuses a malformed collector profile naming the file, line and field
(a profile from a newer collector among them).

Usage: check_bad_input.py --work DIR [--pgq build/pgq]   (without --pgq: the Python half)
"""
import argparse
import csv
import io
import os
import re
import subprocess
import sys
import warnings

import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
import pgq_profile  # noqa: E402

failures = []


def expect_error(what, error, pattern, call):
    try:
        call()
    except error as e:
        if not re.search(pattern, str(e)):
            failures.append("{}: message {!r} does not match {!r}".format(what, str(e), pattern))
        else:
            print("ok   {:<44} {}".format(what, str(e)[:150]))
        return
    except Exception as e:  # noqa: BLE001 - any other exception is the failure reported
        failures.append("{}: raised {} ({}) instead of {}".format(what, type(e).__name__, e, error.__name__))
        return
    failures.append("{}: no error".format(what))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 4)

    def forward(self, x):
        return self.down(torch.relu(self.up(x))).pow(2).mean()


class NoLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))

    def forward(self, x):
        return (x * self.w).sum()


class OddNames(nn.Module):
    def __init__(self):
        super().__init__()
        self.d = nn.ModuleDict({"a #b": nn.Linear(8, 8), "c\rd": nn.Linear(8, 8), 'e,"f': nn.Linear(8, 4)})

    def forward(self, x):
        return self.d['e,"f'](self.d["c\rd"](self.d["a #b"](x))).pow(2).mean()


def python_half(work):
    out = os.path.join(work, "p.yaml")
    m = Mlp()
    x = torch.randn(5, 8)
    expect_error("a model without linear layers", pgq_profile.ProfileError, r"NoLinear has no nn\.Linear",
                 lambda: pgq_profile.collect(NoLinear(), steps=1, out=out))
    expect_error("not a module", pgq_profile.ProfileError, r"model must be a torch\.nn\.Module",
                 lambda: pgq_profile.collect(lambda x: x, steps=1, out=out))
    expect_error("a format pgq does not know", pgq_profile.ProfileError,
                 r"'int9:channel:rtn' is neither a format scheme .* bits=9 is unsupported",
                 lambda: pgq_profile.collect(m, formats=["int9:channel:rtn"], steps=1, out=out))
    expect_error("an unknown scheme", pgq_profile.ProfileError, r"'nvfp8' is neither a format scheme",
                 lambda: pgq_profile.collect(m, formats="fp8,nvfp8", steps=1, out=out))
    expect_error("MX scales without blocks", pgq_profile.ProfileError, r"scale=e8m0 needs block<N> granularity",
                 lambda: pgq_profile.collect(m, formats=["e4m3:channel:rtn:scale=e8m0"], steps=1, out=out))
    for steps in (0, -3, 1.5, True):
        expect_error("steps = {!r}".format(steps), pgq_profile.ProfileError, r"steps must be an integer >= 1",
                     lambda: pgq_profile.collect(m, steps=steps, out=out))
    for key in ("metrics", "outputs"):
        expect_error("{} not a bool".format(key), pgq_profile.ProfileError, key + r" must be True or False, got 'yes'",
                     lambda: pgq_profile.collect(m, steps=1, out=out, **{key: "yes"}))
    expect_error("warmup < 0", pgq_profile.ProfileError, r"warmup must be an integer >= 0",
                 lambda: pgq_profile.collect(m, steps=1, warmup=-1, out=out))
    expect_error("a folder that does not exist", pgq_profile.ProfileError, r"folder '.*nowhere' does not exist",
                 lambda: pgq_profile.collect(m, steps=1, out=os.path.join(work, "nowhere", "p.yaml")))
    expect_error("out is a folder", pgq_profile.ProfileError, r"is a folder",
                 lambda: pgq_profile.collect(m, steps=1, out=work))
    # Session 15: checked before the steps, not in a backward hook or the writer.
    for key, value, pattern in (("seed", -1, r"seed must be an integer in \[0, 2\^63\)"),
                                ("seed", "abc", r"seed must be an integer"),
                                ("seed", 2 ** 70, r"seed must be an integer"),
                                ("name", b"x", r"name must be a non-empty string"),
                                ("optimizer", "adam", r"optimizer must be a torch\.optim\.Optimizer"),
                                ("formats", None, r"formats must be a list"),
                                ("tensor_parallel", 2, r"tensor_parallel 2 needs torch\.distributed initialized")):
        expect_error("{} = {!r}".format(key, value), pgq_profile.ProfileError, pattern,
                     lambda: pgq_profile.collect(m, steps=1, out=out, **{key: value}))
    # Outputs: a FIFO or a device is refused (it would be replaced by a regular file), as
    # is a folder where the CSV goes; a symlink's target is written and the link kept.
    fifo = os.path.join(work, "fifo.yaml")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    expect_error("out is a FIFO", pgq_profile.ProfileError, r"is a FIFO; the collector writes a regular file",
                 lambda: pgq_profile.collect(m, steps=1, out=fifo))
    expect_error("out is a device", pgq_profile.ProfileError, r"is a device",
                 lambda: pgq_profile.collect(m, steps=1, out="/dev/null"))
    os.makedirs(os.path.join(work, "csvdir.csv"), exist_ok=True)
    expect_error("a folder where the CSV goes", pgq_profile.ProfileError, r"the CSV beside out .*csvdir\.csv: is a folder",
                 lambda: pgq_profile.collect(m, steps=1, out=os.path.join(work, "csvdir.yaml")))
    target, link = os.path.join(work, "target.yaml"), os.path.join(work, "link.yaml")
    for p in (target, link):
        if os.path.lexists(p):
            os.unlink(p)
    with open(target, "w") as f:
        f.write("old\n")
    os.chmod(target, 0o644)
    os.symlink("target.yaml", link)
    with pgq_profile.collect(m, steps=1, out=link):
        m(x).backward()
    with open(target) as f:
        written = f.read()
    if not os.path.islink(link) or "gemm_count:" not in written or (os.stat(target).st_mode & 0o777) != 0o644:
        failures.append("a symlinked out: link kept {}, target written {}, mode {:o}".format(
            os.path.islink(link), "gemm_count:" in written, os.stat(target).st_mode & 0o777))
    else:
        print("ok   {:<44} target written, link kept, mode 644".format("out is a symlink"))
    expect_error("sharding without tensor_parallel", pgq_profile.ProfileError, r"give tensor_parallel > 1",
                 lambda: pgq_profile.collect(m, steps=1, out=out, sharding={"up": "column"}))
    expect_error("an unknown sharding", pgq_profile.ProfileError, r"expected column, row or replicated",
                 lambda: pgq_profile.collect(m, steps=1, out=out, tensor_parallel=2, sharding={"up": "diagonal"}))

    def no_backward():
        with pgq_profile.collect(m, steps=2, out=out):
            m(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expect_error("no complete step", pgq_profile.ProfileError, r"no complete training step of Mlp",
                     no_backward)

    if os.path.exists(out):
        os.unlink(out)

    def nan_at_step_two():
        with pgq_profile.collect(m, steps=3, out=out):
            for step in range(3):
                inputs = x.clone()
                if step == 1:
                    inputs[2, 3] = float("nan")
                m(inputs).backward()
    expect_error("NaN statistics", pgq_profile.NonFiniteStatisticsError,
                 r"module up had NaN or Inf values at profiled step 2 of 3: the activation operand of its forward GEMM "
                 r"\(up lhs, tensor up:input\)",
                 nan_at_step_two)
    if os.path.exists(out):
        failures.append("a profile was written although its statistics were not finite")

    def nan_gradient_at_step_three(**options):
        with pgq_profile.collect(m, formats=["fp8"], steps=3, out=out, **options):
            for step in range(3):
                loss = m(x)
                (loss * (float("nan") if step == 2 else 1.0)).backward()
    for options in ({}, {"metrics": True, "outputs": True}):
        expect_error("NaN gradient statistics{}".format(" (metrics)" if options else ""),
                     pgq_profile.NonFiniteStatisticsError,
                     r"module up had NaN or Inf values at profiled step 3 of 3: the gradient operand of its wgrad GEMM "
                     r"\(up:wgrad lhs, tensor up:grad_output\)",
                     lambda: nan_gradient_at_step_three(**options))
        if os.path.exists(out):
            failures.append("a profile was written although its statistics were not finite")

    # And good ones, for the pgq half (the second with the metrics' statistics).
    with pgq_profile.collect(m, formats=["fp8"], steps=2, out=out):
        for _ in range(2):
            m(x).backward()
    with_metrics = os.path.join(work, "metrics.yaml")
    with pgq_profile.collect(m, formats=["fp8"], steps=2, out=with_metrics, metrics=True, outputs=True):
        for _ in range(2):
            m(x).backward()
    return out, with_metrics


def pgq_half(pgq, work, good, with_metrics):
    with open(good) as f:
        text = f.read()
    with open(with_metrics) as f:
        metrics = f.read()

    def run(name, edited, pattern):
        path = os.path.join(work, name + ".yaml")
        with open(path, "w") as f:
            f.write(edited)
        r = subprocess.run([pgq, "recipe", "--profile", path, "--hardware", "h100-sxm", "--policy", "F+B_SR"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if pattern is None:
            if r.returncode != 0:
                failures.append("pgq recipe refused the good collector profile: " + r.stdout)
            else:
                print("ok   {:<44} exit 0".format(name))
            return
        message = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
        if r.returncode != 2 or not re.search(re.escape(path) + pattern, message):
            failures.append("{}: pgq recipe exit {}, message {!r} (expected {!r})".format(
                name, r.returncode, message, path + pattern))
        else:
            print("ok   {:<44} {}".format(name, message[:150]))

    run("good", text, None)
    # Module names YAML would read otherwise (" #" starts a comment, "\r" a line break)
    # are quoted: pgq reads every label back (session 15: "a #b" read as "a", and the
    # forward, dgrad and wgrad records collided).
    odd = OddNames()
    names = os.path.join(work, "names.yaml")
    with pgq_profile.collect(odd, steps=1, out=names):
        odd(torch.randn(3, 8)).backward()
    r = subprocess.run([pgq, "sqnr-table", "--csv", names], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0 or "a #b:wgrad" not in r.stdout:
        failures.append("odd module names: pgq sqnr-table exit {}: {}".format(r.returncode, r.stdout[-300:]))
    else:
        print("ok   {:<44} read back by pgq".format("module names with ' #' and CR"))
    # Both CSVs, the collector's beside the profile and pgq's table, quote a label with a
    # comma or a quote (session 16: 'e,"f' split into two columns), so a CSV reader gets
    # every label back whole and every row has the header's width.
    # (The first layer's input needs no gradient: it has no dgrad.)
    wanted = {"d." + n + suffix for n in ("a #b", "c\rd", 'e,"f') for suffix in ("", ":dgrad", ":wgrad")}
    wanted.remove("d.a #b:dgrad")
    # Bytes, so that the CR inside a quoted label reaches the reader as it is.
    table = subprocess.run([pgq, "sqnr-table", "--csv", names], stdout=subprocess.PIPE, check=True).stdout
    with open(pgq_profile.profile_file.csv_path(names), newline="") as f:
        collector_rows = list(csv.reader(f))
    for what, rows in (("the collector's CSV", collector_rows),
                       ("pgq sqnr-table --csv", list(csv.reader(io.StringIO(table.decode(), newline=""))))):
        column = rows[0].index("label")
        labels = {row[column] for row in rows[1:]}
        widths = {len(row) for row in rows}
        if labels != wanted or len(widths) != 1:
            failures.append("{}: labels {} (expected {}), row widths {}".format(what, sorted(labels), sorted(wanted),
                                                                               sorted(widths)))
        else:
            print("ok   {:<44} {} rows, labels whole".format(what, len(rows) - 1))
    newer = text.replace("pgq_version: \"pgq_profile/{}".format(pgq_profile.COLLECTOR_VERSION),
                         "pgq_version: \"pgq_profile/{}".format(pgq_profile.COLLECTOR_VERSION + 1))
    run("newer_collector", newer, r":\d+: field 'run\.pgq_version': written by pgq_profile collector version 2; "
        r"this pgq reads collector profiles up to version 1")
    run("bad_collector_mark", text.replace("pgq_version: \"pgq_profile/1", "pgq_version: \"pgq_profile/x"),
        r":\d+: field 'run\.pgq_version': .* names no collector version")
    run("nan_sqnr", re.sub(r"sqnr_mean: [0-9.e+-]+", "sqnr_mean: .nan", text, count=1),
        r":\d+: field 'gemms\[0\]\.operands\[0\]\.formats\[0\]\.sqnr_mean'")
    run("negative_fraction", re.sub(r"underflow_fraction: [0-9.e+-]+", "underflow_fraction: -0.5", text, count=1),
        r":\d+: field 'gemms\[0\]\.operands\[0\]\.formats\[0\]\.underflow_fraction'")
    run("cut_short", text[:text.rindex("  - label:")],
        r":\d+: field 'gemm_count': the profile records \d+ GEMMs but lists \d+")
    run("unknown_direction", text.replace("direction: bwd_dgrad", "direction: bwd_xgrad", 1),
        r":\d+: field 'gemms\[\d+\]\.direction'")
    run("bad_format", text.replace("e4m3:tensor:rtn", "e4m3:tensor:rnd", 1),
        r":\d+: field 'run\.formats': bad quantization format \"e4m3:tensor:rnd\"")
    run("good_metrics", metrics, None)
    run("reach_above_one", re.sub(r"\n    reach: [0-9.e+-]+", "\n    reach: 1.5", metrics, count=1),
        r":\d+: field 'gemms\[0\]\.reach'")
    run("output_error_format", metrics.replace("lhs_format: e4m3:tensor:rtn", "lhs_format: e4m3:tensr:rtn", 1),
        r":\d+: field 'gemms\[0\]\.output_errors\[\d+\]\.lhs_format'")
    run("flops_mismatch", re.sub(r"flops: (\d+)", lambda mo: "flops: {}".format(int(mo.group(1)) + 2), text, count=1),
        r":\d+: field 'gemms\[0\]\.flops'")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--pgq")
    args = parser.parse_args()
    os.makedirs(args.work, exist_ok=True)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    good, with_metrics = python_half(args.work)
    if args.pgq:
        pgq_half(args.pgq, args.work, good, with_metrics)
    for f in failures:
        print("FAIL " + f)
    print("{} failures".format(len(failures)) if failures else "OK")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
