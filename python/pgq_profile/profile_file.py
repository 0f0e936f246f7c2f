"""pgq's profile file (plan/profile.cc is the reader and the specification): the YAML
record and the CSV beside it, written from the collector's aggregated statistics, and
the scaling strategies of plan/scaling_strategies.cc."""
import math
import os
import stat
import re
import tempfile


def scaling_stats(absmax, history, updates=None):
    """ScalingStats of one operand's absmax series (>= 2 steps), as pgq's scalingStats():
    delayed scaling from the max of the previous `history` steps; with `updates` (one
    (lr, rigorous bound) per step: the update after it), predicted weight scales."""
    steps = len(absmax)
    s = {"steps": steps, "delayed_history": min(history, steps - 1)}
    transitions = float(steps - 1)
    clips, worst = 0, 1.0
    # A history of zeros keeps the scale before it (TE's _default_sf_compute): the last
    # positive amax's, or at first the unit scale, which is not counted as a clip.
    kept = 0.0
    for t in range(1, steps):
        amax = max(absmax[max(0, t - history):t])
        if amax > 0:
            kept = amax
        x = absmax[t]
        if kept == 0 or x <= kept:
            continue
        clips += 1
        worst = max(worst, x / kept)
    s["delayed_clip_fraction"] = clips / transitions
    s["delayed_worst_ratio"] = worst
    if not updates:
        return s
    clips = rigorous_clips = measured = 0
    worst, over, rigorous_over = 1.0, 0.0, 0.0
    for t in range(1, steps):
        lr, bound = updates[t - 1]
        predicted = absmax[t - 1] + lr
        rigorous = absmax[t - 1] + lr * bound
        x = absmax[t]
        if x > predicted:
            clips += 1
            if predicted > 0:
                worst = max(worst, x / predicted)
        if x > rigorous:
            rigorous_clips += 1
        if x > 0:
            measured += 1
            over += predicted / x
            rigorous_over += rigorous / x
    s["predicted_clip_fraction"] = clips / transitions
    s["predicted_worst_ratio"] = worst
    s["predicted_overestimate"] = over / measured if measured else 1.0
    s["predicted_rigorous_clip_fraction"] = rigorous_clips / transitions
    s["predicted_rigorous_overestimate"] = rigorous_over / measured if measured else 1.0
    return s


def adam_update_bound(beta1, beta2, step):
    """The largest |update| / lr of AdamW's step `step` (plan/scaling_strategies.cc)."""
    cap = 1e30
    if beta2 == 0:
        return 1.0 if beta1 == 0 else cap
    r = beta1 * beta1 / beta2
    total = float(step) if r == 1 else math.expm1(step * math.log(r)) / (r - 1) if r > 0 else 1.0
    try:
        bound = (math.sqrt(-math.expm1(step * math.log(beta2))) / (1 - beta1 ** step) * (1 - beta1)
                 / math.sqrt(1 - beta2) * math.sqrt(total))
    except (OverflowError, ValueError):
        return cap
    return min(bound, cap) if math.isfinite(bound) else cap


def _number(v):
    """A double as yaml-cpp writes it at precision 9 (read back by pgq)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    text = "{:.9g}".format(v)
    return text


_PLAIN = re.compile(r"[A-Za-z0-9_./+-]([A-Za-z0-9_./:+#@ -]*[A-Za-z0-9_./+#@-])?\Z")


def _quoted(s):
    """s as a YAML double-quoted scalar: backslash, quote and every character YAML would
    read as a line break or that is no printable (C0, DEL, C1, U+2028/9, BOM) escaped."""
    out = []
    for ch in s:
        o = ord(ch)
        if ch in "\\\"":
            out.append("\\" + ch)
        elif o < 0x20 or 0x7F <= o < 0xA0:
            out.append("\\x{:02x}".format(o))
        elif o in (0x2028, 0x2029, 0xFEFF):
            out.append("\\u{:04x}".format(o))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _string(s):
    """A YAML scalar for s: plain when unambiguous, else double-quoted (" #" would start a
    comment in a plain one)."""
    if _PLAIN.match(s) and ": " not in s and " #" not in s and not s.endswith(":") and not re.fullmatch(
            r"[-+]?[0-9.eE+-]+|true|false|null|yes|no|on|off|~", s, re.I):
        return s
    return _quoted(s)


def _flow(values, convert=_number):
    return "[" + ", ".join(convert(v) for v in values) + "]"


def profile_yaml(run, gemms):
    """The YAML text of a profile: `run` (dict of ProfileRun fields, model_config a
    multi-line string) and `gemms` (list of dicts of GemmProfile fields, operands as
    dicts of OperandProfile fields, formats as dicts of FormatStats fields)."""
    out = ["# pgq profile (stage i): statistics of every GEMM operand. SQNR = E[x^2] / E[(Q(x)-x)^2] as a ratio, "
           "per quantization format, over the logged steps. Written by pgq_profile (PyTorch).",
           "version: 1", "run:"]
    for key in ("model", "model_config", "corpus", "corpus_fingerprint", "seed", "warmup_steps", "profile_steps",
                "processes", "threads", "precision", "pgq_version", "cpu_isa", "vnni", "formats", "gradient_formats",
                "step_ms", "metrics", "metrics_step_ms"):
        v = run.get(key)
        if key in ("metrics", "metrics_step_ms") and not run.get("metrics"):
            continue  # pgq writes both only for a profile with the metrics' statistics
        if key == "processes" and v <= 1:
            continue
        if key == "model_config":
            out.append("  model_config: |")
            out.extend("    " + line for line in v.rstrip("\n").split("\n"))
        elif isinstance(v, list):
            out.append("  {}: {}".format(key, _flow(v, _string)))
        elif isinstance(v, str):
            out.append("  {}: {}".format(key, _string(v)))
        else:
            out.append("  {}: {}".format(key, _number(v)))
    out.append("gemm_count: {}".format(len(gemms)))
    out.append("gemms:")
    for g in gemms:
        out.append("  - label: " + _string(g["label"]))
        out.append("    direction: " + g["direction"])
        if "grad_of" in g:
            out.append("    grad_of: " + _string(g["grad_of"]))
        out.append("    layer: {}".format(g["layer"]))
        out.append("    gemm_shape: " + _flow(g["gemm_shape"]))
        out.append("    flops: {}".format(g["flops"]))
        out.append("    bytes: {}".format(g["bytes"]))
        out.append("    sharding: " + g["sharding"])
        out.append("    devices: {}".format(g["devices"]))
        out.append("    device_shape: " + _flow(g["device_shape"]))
        out.append("    operands:")
        for o in g["operands"]:
            out.append("      - side: " + o["side"])
            out.append("        role: " + o["role"])
            out.append("        tensor: " + _string(o["tensor"]))
            for key in ("shape", "contract_dims", "batch_dims"):
                out.append("        {}: {}".format(key, _flow(o[key])))
            for key in ("absmax", "absmax_mean", "rms", "zero_fraction", "nonfinite_fraction"):
                out.append("        {}: {}".format(key, _number(o[key])))
            out.append("        formats:")
            for f in o["formats"]:
                fields = ", ".join("{}: {}".format(k, _string(f[k]) if k == "format" else _number(f[k]))
                                   for k in ("format", "sqnr_mean", "sqnr_min", "sqnr_max", "mse",
                                             "underflow_fraction", "clipped_fraction", "bias_sqnr_mean")
                                   if k in f and (k != "bias_sqnr_mean" or f[k] > 0))
                out.append("          - {" + fields + "}")
            if o.get("scaling"):
                out.append("        scaling:")
                for k, v in o["scaling"].items():
                    out.append("          {}: {}".format(k, _number(v)))
        for key in ("reach", "gradient_reach"):
            if key in g:
                out.append("    {}: {}".format(key, _number(g[key])))
        if g.get("output_errors"):
            out.append("    output_errors:")
            for e in g["output_errors"]:
                out.append("      - {{lhs_format: {}, rhs_format: {}, sqnr_mean: {}, sqnr_min: {}}}".format(
                    _string(e["lhs_format"]), _string(e["rhs_format"]), _number(e["sqnr_mean"]),
                    _number(e["sqnr_min"])))
    return "\n".join(out) + "\n"


def _csv_field(text):
    """TEXT as one CSV field, as pgq writes it (support/escape.h csvField, RFC 4180): as it
    is unless it holds a comma, a double quote or a line break, else quoted with each `"`
    doubled. Module paths (ModuleDict keys) may hold any of them."""
    if not any(c in text for c in ',"\n\r'):
        return text
    return '"' + text.replace('"', '""') + '"'


def profile_csv(gemms):
    """The CSV pgq writes beside a profile (plan/profile.cc profileToCsv)."""
    rows = ["label,direction,layer,batch,m,k,n,flops,bytes,intensity,side,role,tensor,absmax,rms,zero_fraction,"
            "format,sqnr_mean,sqnr_min,sqnr_max,sqnr_min_db,underflow_fraction,clipped_fraction,"
            "delayed_clip_fraction,delayed_worst_ratio,predicted_clip_fraction"]
    for g in gemms:
        b, m, k, n = g["gemm_shape"]
        intensity = g["flops"] / g["bytes"] if g["bytes"] > 0 else 0.0
        for o in g["operands"]:
            s = o.get("scaling")
            scaling = ",,"
            if s:
                scaling = "{:.9g},{:.9g},{}".format(s["delayed_clip_fraction"], s["delayed_worst_ratio"],
                                                    "{:.9g}".format(s["predicted_clip_fraction"])
                                                    if "predicted_clip_fraction" in s else "")
            for f in o["formats"]:
                rows.append(",".join([
                    _csv_field(g["label"]), g["direction"], str(g["layer"]), str(b), str(m), str(k), str(n), str(g["flops"]),
                    str(g["bytes"]), "{:.6g}".format(intensity), o["side"], o["role"], _csv_field(o["tensor"]),
                    "{:.9g}".format(o["absmax"]), "{:.9g}".format(o["rms"]), "{:.9g}".format(o["zero_fraction"]),
                    f["format"], "{:.9g}".format(f["sqnr_mean"]), "{:.9g}".format(f["sqnr_min"]),
                    "{:.9g}".format(f["sqnr_max"]), "{:.4f}".format(10 * math.log10(max(f["sqnr_min"], 1e-30))),
                    "{:.9g}".format(f["underflow_fraction"]), "{:.9g}".format(f["clipped_fraction"]), scaling]))
    return "\n".join(rows) + "\n"


def csv_path(path):
    """The CSV beside profile PATH: its extension replaced by .csv (plan/profile.cc profileCsvPath)."""
    root, ext = os.path.splitext(path)
    out = root + ".csv"
    return out + ".csv" if out == path else out


def output_problem(path):
    """Why `path` cannot take a profile (or its CSV), or None. A symlink is followed (its
    target is replaced, the link kept); anything but a regular file there is refused, as
    pgq refuses a sidecar beside a file written in place: a FIFO, a device or a socket
    would be replaced by a regular file, and a folder cannot be."""
    target = os.path.realpath(path)
    if not os.path.isdir(os.path.dirname(target)):
        return "folder '{}' does not exist; create it first".format(os.path.dirname(target))
    if os.path.lexists(target):
        st = os.stat(target)
        if stat.S_ISDIR(st.st_mode):
            return "is a folder; give a file such as {}".format(os.path.join(path, "profile.yaml"))
        if not stat.S_ISREG(st.st_mode):
            kind = "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device" if (
                stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)) else "a socket"
            return "is {}; the collector writes a regular file (and a .csv beside it)".format(kind)
    if not os.access(os.path.dirname(target), os.W_OK):
        return "cannot write in folder '{}'".format(os.path.dirname(target))
    return None


def write_atomically(path, text):
    """Replaces the regular file at `path` (a symlink's target, the link kept) by `text`:
    a temporary file beside it, renamed over it, with the mode the file had (a new one
    gets 0666 less the umask, as open() would give it)."""
    target = os.path.realpath(path)
    folder = os.path.dirname(target)
    if os.path.exists(target):
        mode = stat.S_IMODE(os.stat(target).st_mode)
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(prefix=".pgq_profile.", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
