#!/usr/bin/env python3
"""Writes fp8_table.txt: the value of every code of the two FP8 formats (OCP OFP8: E4M3 with
no infinities and S.1111.111 the NaN, E5M2 with IEEE-like infinities and NaNs), from the
formats' definitions in exact rational arithmetic, independently of loom/cpp/fp8.hpp.
test_fp8.cpp reads it. Run from this folder: python3 make_fp8_table.py > fp8_table.txt"""
from fractions import Fraction

FORMATS = {"e4m3": (4, 3, 7, False), "e5m2": (5, 2, 15, True)}


def value(fmt, code):
    exp_bits, man_bits, bias, has_inf = FORMATS[fmt]
    sign = -1 if code & 0x80 else 1
    e = (code >> man_bits) & ((1 << exp_bits) - 1)
    m = code & ((1 << man_bits) - 1)
    top = (1 << exp_bits) - 1
    if has_inf and e == top:
        return "nan" if m else ("-inf" if sign < 0 else "inf")
    if not has_inf and e == top and m == (1 << man_bits) - 1:
        return "nan"
    if e == 0:  # subnormal
        v = Fraction(m, 1 << man_bits) * Fraction(2) ** (1 - bias)
    else:
        v = (1 + Fraction(m, 1 << man_bits)) * Fraction(2) ** (e - bias)
    f = float(sign * v)
    assert Fraction(f) == sign * v  # a double holds it exactly
    if f == 0 and sign < 0:
        return "-0x0.0p+0"
    return f.hex()


print("# format code value (float.hex, or nan / inf / -inf); written by make_fp8_table.py")
for fmt in FORMATS:
    for code in range(256):
        print(fmt, f"0x{code:02x}", value(fmt, code))
