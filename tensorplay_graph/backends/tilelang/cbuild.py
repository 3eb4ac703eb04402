"""Building a lowered C kernel into a shared library, as cheaply as its source allows.

TileLang's C source includes ``tl_templates/cpp/common.h``, whose ``half.hpp`` pulls in
``<istream>``, ``<algorithm>``, ``<limits>``...: most of a build's time (measured, see
benchmarks/RESULTS.md "TileLang C build cost": g++ 5.6 s with it vs gcc 0.35 s without,
loaded machine). A pointwise kernel uses none of it -- float / int8 / bool arithmetic,
``x != x`` for isnan and float libm calls -- so a source that calls only the functions in
:data:`PLAIN_C_CALLS` and names nothing from the header is built as C11 with the standard
headers common.h itself includes. Anything else keeps TileLang's header and C++17.

Libraries are keyed by the digest of the C source, the compiler and its flags: programs
whose kernels lower to the same C (they differ only in node names) share one build.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional

from . import cache

OPT_FLAGS = ["-O3", "-march=native", "-fopenmp", "-w"]
CXX_FLAGS = OPT_FLAGS + ["-std=c++17"]
C_FLAGS = ["-x", "c"] + OPT_FLAGS + ["-std=c11"]
TL_HEADER = "#include <tl_templates/cpp/common.h>"
# What common.h includes besides half.hpp (C headers, identical in C and C++).
STD_HEADERS = "#include <math.h>\n#include <stdbool.h>\n#include <stdint.h>\n#include <string.h>"
#: libm functions on float that mean the same in C and C++ (the ``f`` forms: no overloads).
PLAIN_C_CALLS = frozenset({"sqrtf", "truncf", "floorf", "ceilf", "roundf", "rintf", "nearbyintf",
                           "fabsf", "fmaxf", "fminf", "fmodf", "copysignf", "main_kernel"})
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_KEYWORDS = frozenset({"if", "for", "while", "return", "sizeof", "switch"})
_CXX_ONLY = re.compile(r"::|\btemplate\b|\bhalf\b|\bvec_type\b|\b(?:float|double|int\d+_t|uint\d+_t)\d+\b")


def plain_c(c_source: str) -> Optional[str]:
    """``c_source`` with standard headers instead of TileLang's, when it is plain C; else None."""
    if c_source.count(TL_HEADER) != 1:
        return None
    code = "\n".join(line for line in c_source.splitlines()
                     if not line.lstrip().startswith(("#", "//")))
    if _CXX_ONLY.search(code):
        return None
    calls = set(_CALL.findall(code)) - _KEYWORDS
    # casts such as ((float)(x)) are not calls: ``_CALL`` needs a name right before "("
    if not calls <= PLAIN_C_CALLS:
        return None
    return c_source.replace(TL_HEADER, STD_HEADERS)


def build(c_source: str, include_dir: str) -> Path:
    """The shared library of lowered ``c_source`` (built once per distinct source)."""
    plain = plain_c(c_source)
    if plain is not None:
        source, flags, compiler, includes = plain, C_FLAGS, os.environ.get("CC", "gcc"), []
    else:
        source, flags, compiler, includes = c_source, CXX_FLAGS, os.environ.get("CXX", "g++"), [include_dir]
    key = cache.digest(source, flags, compiler)
    return cache.build_shared_library(source, key, includes, flags, compiler)
