"""Quantization formats as pgq writes them (support/quant_format.h), and the format
schemes of pgq's policies (support/quant_schemes.def).

A format is text: <element>:<granularity>:<rounding>[:scale=e8m0|scale=two_level|scale=e4m3]
[:asym][:clip=mse|clip=p<percent>][:rht], e.g. int8:channel:rtn, e4m3:tensor:rtn,
e2m1:block16x16:rtn:scale=e4m3, mxfp8_e4m3, nvfp4. parse() accepts exactly what pgq
accepts (aliases included) and Format.text() is pgq's canonical form, so the profile
names every format as pgq would.
"""
import math
import re

# pgq's format schemes (support/quant_schemes.def FORMAT_SCHEME, in its order): the
# formats a policy's scheme quantizes weights and activations to, and gradients to.
SCHEMES = ("int8", "fp8", "fp8_e4m3", "mxfp8", "mxint8", "moss_fp8", "nvfp4", "mxfp4", "bf16")

_MAX_BLOCK = 1 << 24
# The length of a Hadamard block (support/quant_format.h kHadamardBlock): a format with
# rht needs a contracting length that is a multiple of it.
HADAMARD_BLOCK = 16
# support/quant_format.cc expandAlias: alias -> canonical head (the scale field follows).
_ALIASES = {"mxfp8_e4m3": "e4m3:block32", "mxfp8_e5m2": "e5m2:block32", "mxint8": "int8:block32",
            "mxfp4": "e2m1:block32", "nvfp4": "e2m1:block16", "bf16": "bf16:tensor"}
_GRAMMAR = ("expected <int<2..8>|e4m3|e5m2|e2m1|bf16>:<tensor|channel|block<N>|block<N>x<N>>:<rtn|sr>"
            "[:scale=e8m0|scale=two_level|scale=e4m3][:asym][:clip=mse|clip=p<percent>][:rht], "
            "e.g. int8:channel:rtn, e4m3:tensor:rtn, mxfp8_e4m3, nvfp4")
_FLOAT_ELEMENTS = ("e4m3", "e5m2", "e2m1", "bf16")
# elementBits: the bits a float element takes.
_ELEMENT_BITS = {"e4m3": 8, "e5m2": 8, "e2m1": 4, "bf16": 16}
_GRANULARITY_NAMES = {"tensor": "per-tensor", "channel": "per-channel", "block": "per-block"}


class FormatError(ValueError):
    """A format text pgq would refuse; the message is pgq's reason."""


class Format:
    """One quantization format (fields as support/quant_format.h's QuantFormat)."""

    # Element limits (support/quant_format.cc elementLimits): the largest value, the
    # exponent of the smallest normal value, the largest normal exponent and the stored
    # mantissa bits. Int elements: qmax, 0, bits - 2, 0.
    _FLOAT_LIMITS = {"e4m3": (448.0, -6, 8, 3), "e5m2": (57344.0, -14, 15, 2), "e2m1": (6.0, 0, 2, 1),
                     "bf16": (float.fromhex("0x1.fep127"), -126, 127, 7)}

    def __init__(self, element="int", bits=8, granularity="channel", block=0, rounding="rtn", scale="f32",
                 asymmetric=False, clipping=None, percentile=100.0, block2d=False, hadamard=False):
        self.element = element          # int | e4m3 | e5m2 | e2m1 | bf16
        self.bits = bits                # 8 for FP8 elements, 4 for e2m1, 16 for bf16
        self.granularity = granularity  # tensor | channel | block
        self.block = block
        self.block2d = block2d          # block only: block x block tiles (block<N>x<N>)
        self.rounding = rounding        # rtn | sr
        self.scale = scale              # f32 | e8m0 | two_level | e4m3
        self.asymmetric = asymmetric
        self.clipping = clipping        # None | "mse" | "percentile"
        self.percentile = percentile
        self.hadamard = hadamard        # rht: random Hadamard transform along the contracting dim

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
        gran = self.granularity
        if self.granularity == "block":
            gran = "block{0}x{0}".format(self.block) if self.block2d else "block{}".format(self.block)
        out = "{}:{}:{}".format(head, gran, self.rounding)
        if self.scale != "f32":
            out += ":scale=" + self.scale
        if self.asymmetric:
            out += ":asym"
        if self.clipping == "mse":
            out += ":clip=mse"
        elif self.clipping == "percentile":
            out += ":clip=p" + _shortest(self.percentile)
        if self.hadamard:
            out += ":rht"
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
        return "-0" if value == 0 and math.copysign(1.0, value) < 0 else str(int(value))
    return repr(value)


def _bad(text, why):
    raise FormatError('bad quantization format "{}": {} ({})'.format(text, why, _GRAMMAR))


def _integer(text):
    """An int field as std::from_chars reads it (support/quant_format.cc parseNumber):
    an optional '-' and decimal digits, within int's range; None otherwise."""
    if not re.fullmatch(r"-?[0-9]+", text):
        return None
    value = int(text)
    return value if -(1 << 31) <= value < (1 << 31) else None


def _validate(f, text):
    """QuantFormat::validate's checks, in its order and with its messages."""
    def fail(why):
        _bad(text, "quant format: " + why)
    if f.element != "int":
        if f.bits != _ELEMENT_BITS[f.element]:
            fail("bits={} for {}, expected {}".format(f.bits, f.element, _ELEMENT_BITS[f.element]))
        if f.asymmetric:
            fail("{} elements are symmetric (no asym)".format(f.element))
        if f.clipping is not None:
            fail("{} elements take no clip field (they saturate at their largest value)".format(f.element))
    if f.element == "bf16" and (f.granularity != "tensor" or f.scale != "f32" or f.hadamard):
        fail("bf16 elements take no scale (f32's exponent range): tensor granularity, no scale or rht field "
             "(bf16:tensor:rtn or bf16:tensor:sr)")
    if f.scale != "f32":
        if f.granularity != "block":
            fail("scale={} needs block<N> granularity (e.g. block32, as MX), not {}".format(
                f.scale, _GRANULARITY_NAMES[f.granularity]))
        if f.asymmetric or f.clipping is not None:
            fail("scale={} takes no asym or clip field".format(f.scale))
        if f.scale == "two_level" and f.element == "int":
            fail("scale=two_level (MOSS) needs an FP8 element (e4m3 or e5m2)")
        if f.scale == "two_level" and f.element == "e2m1":
            fail("scale=two_level (MOSS) needs an FP8 element (e4m3 or e5m2), not e2m1")
        if f.scale == "e4m3" and f.element != "e2m1":
            fail("scale=e4m3 (NVFP4) needs the e2m1 element, not {}".format(f.element))
    if f.block2d and f.granularity != "block":
        fail("2-D blocks (block<N>x<N>) need per-block granularity")
    if f.block2d and not f.emulated:
        fail("2-D blocks (block<N>x<N>) need a float element or a block scale (e.g. e2m1:block16x16:rtn:scale=e4m3, "
             "int8:block32x32:rtn:scale=e8m0); an integer grid with f32 scales takes 1-D blocks (block<N>)")
    if f.hadamard and not f.is_float:
        fail("rht (random Hadamard transform) needs a float element (e2m1, e4m3 or e5m2)")
    if f.element != "bf16" and not 2 <= f.bits <= 8:
        fail("bits={} is unsupported, expected 2..8".format(f.bits))
    if f.granularity == "block" and not 1 <= f.block <= _MAX_BLOCK:
        fail("block={} is invalid for per-block scales, expected 1..{}".format(f.block, _MAX_BLOCK))
    if f.clipping == "percentile" and not 0.0 < f.percentile <= 100.0:
        fail("clipping percentile {} is out of range, expected (0, 100]".format(_shortest(f.percentile)))


def _expand_alias(text):
    """The canonical text of an alias (nvfp4[:rtn|:sr], ...), or None (quant_format.cc
    expandAlias)."""
    for alias, head in _ALIASES.items():
        if not text.startswith(alias):
            continue
        rest = text[len(alias):]
        if rest not in ("", ":rtn", ":sr"):
            return None
        rounding = rest[1:] if rest else "rtn"
        if alias == "bf16":
            return "{}:{}".format(head, rounding)
        return "{}:{}:scale={}".format(head, rounding, "e4m3" if alias == "nvfp4" else "e8m0")
    return None


def parse(text):
    """The Format of `text` (pgq's grammar and aliases, QuantFormat::parse); FormatError
    when pgq would refuse it."""
    if not isinstance(text, str):
        raise FormatError("a quantization format is text such as 'int8:channel:rtn', got {!r}".format(text))
    canonical = _expand_alias(text)
    if canonical is not None:
        return parse(canonical)
    fields = text.split(":")
    if len(fields) < 3:
        _bad(text, "needs at least element, granularity and rounding")
    f = Format()
    if fields[0] in _FLOAT_ELEMENTS:
        f.element = fields[0]
        if fields[0] in ("e2m1", "bf16"):
            f.bits = _ELEMENT_BITS[fields[0]]
    elif fields[0].startswith("int") and _integer(fields[0][3:]) is not None:
        f.bits = _integer(fields[0][3:])
    else:
        _bad(text, "bad element field '{}'".format(fields[0]))
    gran = fields[1]
    x = gran.find("x")
    if gran in ("tensor", "channel"):
        f.granularity = gran
    elif gran.startswith("block") and _integer(gran[5:]) is not None:
        f.granularity, f.block = "block", _integer(gran[5:])
    elif gran.startswith("block") and x >= 0 and _integer(gran[5:x]) is not None:
        f.block = _integer(gran[5:x])
        if _integer(gran[x + 1:]) != f.block:
            _bad(text, "bad granularity '{}': 2-D blocks are square, block<N>x<N>".format(gran))
        f.granularity, f.block2d = "block", True
    else:
        _bad(text, "bad granularity '{}'".format(gran))
    if fields[2] not in ("rtn", "sr"):
        _bad(text, "bad rounding '{}'".format(fields[2]))
    f.rounding = fields[2]
    seen = set()
    for field in fields[3:]:
        kind = "scale" if field.startswith("scale=") else "clip" if field.startswith("clip=") else field
        known = field in ("scale=e8m0", "scale=two_level", "scale=e4m3", "rht", "asym", "clip=mse") or \
            field.startswith("clip=p")
        if kind in seen or not known:
            _bad(text, "unknown or repeated field '{}'".format(field))
        seen.add(kind)
        if field.startswith("scale="):
            f.scale = field[6:]
        elif field == "rht":
            f.hadamard = True
        elif field == "asym":
            f.asymmetric = True
        elif field == "clip=mse":
            f.clipping = "mse"
        else:
            f.clipping = "percentile"
            # std::from_chars's decimal form: an optional '-', digits with a point, an
            # exponent; no '+' in front, no inf or nan (they are not finite).
            number = field[6:]
            if not re.fullmatch(r"-?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", number) or \
                    not math.isfinite(float(number)):
                _bad(text, "bad percentile '{}'".format(number))
            f.percentile = float(number)
    _validate(f, text)
    return f


# support/quant_schemes.def FORMAT_SCHEME: (operand element, gradient element, granularity,
# block, scale, weights in block x block tiles).
_SCHEME_INFO = {
    "int8": ("int", "int", "channel", 0, "f32", False),
    "fp8": ("e4m3", "e5m2", "tensor", 0, "f32", False),
    "fp8_e4m3": ("e4m3", "e4m3", "tensor", 0, "f32", False),
    "mxfp8": ("e4m3", "e4m3", "block", 32, "e8m0", False),
    "mxint8": ("int", "int", "block", 32, "e8m0", False),
    "moss_fp8": ("e4m3", "e5m2", "block", 32, "two_level", False),
    "nvfp4": ("e2m1", "e2m1", "block", 16, "e4m3", True),
    "mxfp4": ("e2m1", "e2m1", "block", 32, "e8m0", False),
    "bf16": ("bf16", "bf16", "tensor", 0, "f32", False),
}


def scheme_formats(scheme, rounding, gradient_rounding):
    """(operand, weight, gradient) Formats of a scheme (support/quant_scheme.cc
    schemeFormats): the weight format is the operand format in block x block tiles where
    the scheme says so (nvfp4); bf16 always rounds to nearest."""
    element, gradient_element, granularity, block, scale, weight_2d = _SCHEME_INFO[scheme]
    if scheme == "bf16":
        rounding = gradient_rounding = "rtn"

    def make(e, r):
        return Format(element=e, bits=8 if e == "int" else _ELEMENT_BITS[e], granularity=granularity, block=block,
                      rounding=r, scale=scale)
    weight = make(element, rounding)
    weight.block2d = weight_2d
    return make(element, rounding), weight, make(gradient_element, gradient_rounding)


def _four_bit(scheme):
    """familyOf(scheme) is nvfp4 or mxfp4 (their formats are also profiled with rht)."""
    return _SCHEME_INFO[scheme][0] == "e2m1"


def profile_formats(items):
    """What `pgq train --profile-formats ITEMS` profiles (plan/profile_request.cc
    profileRequest) on a machine whose int8 GEMMs run 8 bits exactly: int8 per channel
    always (round to nearest; gradients also stochastic rounding), then per item a
    scheme's operand and weight formats (rtn) and its gradient format in both roundings,
    for 4-bit schemes (nvfp4, mxfp4) each also with the random Hadamard transform, or an
    explicit format for every operand. Returns (formats, gradient_formats) as lists of
    texts: every operand takes `formats` (weights, activations and gradients alike, as
    passes/instrument_stats.cc gives them), gradient operands `gradient_formats` too,
    formats with rht only where the contracting length is a multiple of 16."""
    formats, gradient_formats = ["int8:channel:rtn"], ["int8:channel:sr"]

    def once(into, text):
        if text not in into:
            into.append(text)
    for item in items:
        if item == "int8":
            continue
        if item in SCHEMES:
            for hadamard in (False, True):
                if hadamard and not _four_bit(item):
                    break
                operand, weight, gradient = scheme_formats(item, "rtn", "rtn")
                sr_gradient = scheme_formats(item, "rtn", "sr")[2]
                for f in (operand, weight, gradient, sr_gradient):
                    f.hadamard = hadamard
                once(formats, operand.text())
                once(formats, weight.text())
                once(gradient_formats, gradient.text())
                once(gradient_formats, sr_gradient.text())
        else:
            try:
                f = parse(item)
            except FormatError as e:
                raise FormatError("formats: '{}' is neither a format scheme ({}) nor a format pgq knows: {}".format(
                    item, ", ".join(SCHEMES), e)) from None
            once(formats, f.text())
    return formats, gradient_formats


def output_pairs(items):
    """The (operand format, gradient format) pairs whose output errors `pgq train
    --profile-metrics --profile-formats ITEMS` measures (plan/profile_request.cc
    outputPairs) on hardware whose int8 GEMMs run 8 bits on both operands (a GPU; pgq
    narrows them to what its CPU runs exactly): int8 per channel with round to nearest,
    its gradient also with stochastic rounding, then per scheme its operand format (rtn,
    also for weights: no 2-D tiles, no rht) with its gradient format in rtn and in sr
    (bf16: rtn only). Explicit formats add none."""
    pairs = []

    def once(pair):
        if pair not in pairs:
            pairs.append(pair)
    once(("int8:channel:rtn", "int8:channel:rtn"))
    once(("int8:channel:rtn", "int8:channel:sr"))
    for item in items:
        if item in SCHEMES and item != "int8":
            operand, _, gradient = scheme_formats(item, "rtn", "rtn")
            once((operand.text(), gradient.text()))
            once((operand.text(), scheme_formats(item, "rtn", "sr")[2].text()))
    return pairs
