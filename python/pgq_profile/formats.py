"""Quantization formats as pgq writes them (support/quant_format.h), and the format
schemes of pgq's policies (plan/policy.h).

A format is text: <element>:<granularity>:<rounding>[:scale=e8m0|scale=two_level][:asym]
[:clip=mse|clip=p<percent>], e.g. int8:channel:rtn, e4m3:tensor:rtn, mxfp8_e4m3. parse()
accepts exactly what pgq accepts (aliases included) and Format.text() is pgq's canonical
form, so the profile names every format as pgq would.
"""
import math
import re

# pgq's format schemes (plan/policy.h kFormatSchemes): the formats a policy's scheme
# quantizes weights and activations to, and gradients to.
SCHEMES = ("int8", "fp8", "fp8_e4m3", "mxfp8", "mxint8", "moss_fp8")

_MAX_BLOCK = 1 << 24
_ALIASES = {"mxfp8_e4m3": "e4m3:block32", "mxfp8_e5m2": "e5m2:block32", "mxint8": "int8:block32"}
_GRAMMAR = ("expected <int<2..8>|e4m3|e5m2>:<tensor|channel|block<N>>:<rtn|sr>[:scale=e8m0|scale=two_level]"
            "[:asym][:clip=mse|clip=p<percent>], e.g. int8:channel:rtn, e4m3:tensor:rtn, mxfp8_e4m3")


class FormatError(ValueError):
    """A format text pgq would refuse; the message is pgq's reason."""


class Format:
    """One quantization format (fields as support/quant_format.h's QuantFormat)."""

    # Element limits (support/quant_format.cc elementLimits): the largest value, the
    # exponent of the smallest normal value, the largest normal exponent and the stored
    # mantissa bits. Int elements: qmax, 0, bits - 2, 0.
    _FLOAT_LIMITS = {"e4m3": (448.0, -6, 8, 3), "e5m2": (57344.0, -14, 15, 2)}

    def __init__(self, element="int", bits=8, granularity="channel", block=0, rounding="rtn", scale="f32",
                 asymmetric=False, clipping=None, percentile=100.0):
        self.element = element          # int | e4m3 | e5m2
        self.bits = bits
        self.granularity = granularity  # tensor | channel | block
        self.block = block
        self.rounding = rounding        # rtn | sr
        self.scale = scale              # f32 | e8m0 | two_level
        self.asymmetric = asymmetric
        self.clipping = clipping        # None | "mse" | "percentile"
        self.percentile = percentile

    @property
    def is_float(self):
        return self.element != "int"

    @property
    def emulated(self):
        """pgq runs it as fake quantization on CPUs (anything but an int grid with f32 scales)."""
        return self.is_float or self.scale != "f32"

    def limits(self):
        if self.is_float:
            return self._FLOAT_LIMITS[self.element]
        return (float((1 << (self.bits - 1)) - 1), 0, self.bits - 2, 0)

    def text(self):
        head = "int{}".format(self.bits) if self.element == "int" else self.element
        gran = "block{}".format(self.block) if self.granularity == "block" else self.granularity
        out = "{}:{}:{}".format(head, gran, self.rounding)
        if self.scale != "f32":
            out += ":scale=" + self.scale
        if self.asymmetric:
            out += ":asym"
        if self.clipping == "mse":
            out += ":clip=mse"
        elif self.clipping == "percentile":
            out += ":clip=p" + _shortest(self.percentile)
        return out

    def with_rounding(self, rounding):
        f = Format(**self.__dict__)
        f.rounding = rounding
        return f

    def __eq__(self, other):
        return isinstance(other, Format) and self.text() == other.text()

    def __hash__(self):
        return hash(self.text())

    def __repr__(self):
        return "Format({!r})".format(self.text())


def _shortest(value):
    """The shortest text that reads back as `value`, as fmt's {} writes a double."""
    if value == int(value) and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def _bad(text, why):
    raise FormatError('bad quantization format "{}": {} ({})'.format(text, why, _GRAMMAR))


def _validate(f, text):
    def fail(why):
        _bad(text, why)
    if f.element != "int":
        if f.bits != 8:
            fail("bits={} for {}, expected 8".format(f.bits, f.element))
        if f.asymmetric:
            fail("{} elements are symmetric (no asym)".format(f.element))
        if f.clipping is not None:
            fail("{} elements take no clip field (they saturate at their largest value)".format(f.element))
    if f.scale != "f32":
        if f.granularity != "block":
            fail("scale={} needs block<N> granularity (e.g. block32, as MX), not {}".format(
                f.scale, {"tensor": "per-tensor", "channel": "per-channel"}[f.granularity]))
        if f.asymmetric or f.clipping is not None:
            fail("scale={} takes no asym or clip field".format(f.scale))
        if f.scale == "two_level" and f.element == "int":
            fail("scale=two_level (MOSS) needs an FP8 element (e4m3 or e5m2)")
    if not 2 <= f.bits <= 8:
        fail("bits={} is unsupported, expected 2..8".format(f.bits))
    if f.granularity == "block" and not 1 <= f.block <= _MAX_BLOCK:
        fail("block={} is invalid for per-block scales, expected 1..{}".format(f.block, _MAX_BLOCK))
    if f.clipping == "percentile" and not 0.0 < f.percentile <= 100.0:
        fail("clipping percentile {} is out of range, expected (0, 100]".format(f.percentile))


def parse(text):
    """The Format of `text` (pgq's grammar and aliases); FormatError when pgq would refuse it."""
    if not isinstance(text, str):
        raise FormatError("a quantization format is text such as 'int8:channel:rtn', got {!r}".format(text))
    for alias, head in _ALIASES.items():
        if text.startswith(alias):
            rest = text[len(alias):]
            if rest in ("", ":rtn", ":sr"):
                return parse("{}:{}:scale=e8m0".format(head, rest[1:] if rest else "rtn"))
    fields = text.split(":")
    if len(fields) < 3:
        _bad(text, "needs at least element, granularity and rounding")
    f = Format()
    if fields[0] in ("e4m3", "e5m2"):
        f.element = fields[0]
    elif re.fullmatch(r"int[0-9]+", fields[0]):
        f.bits = int(fields[0][3:])
    else:
        _bad(text, "bad element field '{}'".format(fields[0]))
    if fields[1] in ("tensor", "channel"):
        f.granularity = fields[1]
    elif re.fullmatch(r"block[0-9]+", fields[1]):
        f.granularity, f.block = "block", int(fields[1][5:])
    else:
        _bad(text, "bad granularity '{}'".format(fields[1]))
    if fields[2] not in ("rtn", "sr"):
        _bad(text, "bad rounding '{}'".format(fields[2]))
    f.rounding = fields[2]
    seen = set()
    for field in fields[3:]:
        kind = "scale" if field.startswith("scale=") else "clip" if field.startswith("clip=") else field
        if kind in seen:
            _bad(text, "unknown or repeated field '{}'".format(field))
        seen.add(kind)
        if field in ("scale=e8m0", "scale=two_level"):
            f.scale = field[6:]
        elif field == "asym":
            f.asymmetric = True
        elif field == "clip=mse":
            f.clipping = "mse"
        elif field.startswith("clip=p"):
            f.clipping = "percentile"
            try:
                f.percentile = float(field[6:])
            except ValueError:
                _bad(text, "bad percentile '{}'".format(field[6:]))
            if not math.isfinite(f.percentile) or not re.fullmatch(r"[0-9.eE+-]+", field[6:]):
                _bad(text, "bad percentile '{}'".format(field[6:]))
        else:
            _bad(text, "unknown or repeated field '{}'".format(field))
    _validate(f, text)
    return f


def scheme_formats(scheme, rounding, gradient_rounding):
    """(operand format, gradient format) texts of an FP8/MX scheme (plan/policy.cc schemeFormats)."""
    r, g = rounding, gradient_rounding
    table = {
        "fp8": ("e4m3:tensor:" + r, "e5m2:tensor:" + g),
        "fp8_e4m3": ("e4m3:tensor:" + r, "e4m3:tensor:" + g),
        "mxfp8": ("e4m3:block32:{}:scale=e8m0".format(r), "e4m3:block32:{}:scale=e8m0".format(g)),
        "mxint8": ("int8:block32:{}:scale=e8m0".format(r), "int8:block32:{}:scale=e8m0".format(g)),
        "moss_fp8": ("e4m3:block32:{}:scale=two_level".format(r), "e5m2:block32:{}:scale=two_level".format(g)),
    }
    return table[scheme]


def profile_formats(items):
    """What `pgq train --profile-formats ITEMS` profiles (runtime/training_session.cc
    profileFormats) on a machine whose int8 GEMMs run 8 bits exactly: int8 per channel
    always (round to nearest; gradients also stochastic rounding), then per item a
    scheme's operand format (rtn) and its gradient format in both roundings, or an explicit
    format for every operand. Returns (formats, gradient_formats) as lists of texts."""
    formats, gradient_formats = ["int8:channel:rtn"], ["int8:channel:sr"]

    def once(into, text):
        if text not in into:
            into.append(text)
    for item in items:
        if item == "int8":
            continue
        if item in SCHEMES:
            operand, gradient = scheme_formats(item, "rtn", "rtn")
            once(formats, operand)
            once(gradient_formats, gradient)
            once(gradient_formats, scheme_formats(item, "rtn", "sr")[1])
        else:
            try:
                once(formats, parse(item).text())
            except FormatError as e:
                raise FormatError("formats: '{}' is neither a format scheme ({}) nor a format pgq knows: {}".format(
                    item, ", ".join(SCHEMES), e)) from None
    return formats, gradient_formats


def output_pairs(items):
    """The (operand format, gradient format) pairs whose output errors `pgq train
    --profile-metrics --profile-formats ITEMS` measures (plan/profile_request.cc
    outputPairs) on hardware whose int8 GEMMs run 8 bits on both operands (a GPU; pgq
    narrows them to what its CPU runs exactly): int8 per channel with round to nearest,
    its gradient also with stochastic rounding, then per FP8/MX scheme its operand
    format (rtn) with its gradient format in rtn and in sr. Explicit formats add none."""
    pairs = []

    def once(pair):
        if pair not in pairs:
            pairs.append(pair)
    once(("int8:channel:rtn", "int8:channel:rtn"))
    once(("int8:channel:rtn", "int8:channel:sr"))
    for item in items:
        if item in SCHEMES and item != "int8":
            operand, gradient = scheme_formats(item, "rtn", "rtn")
            once((operand, gradient))
            once((operand, scheme_formats(item, "rtn", "sr")[1]))
    return pairs
