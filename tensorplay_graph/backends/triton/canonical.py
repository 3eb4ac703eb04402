"""Canonical kernel sources: the same kernel in every layer of a model compiles once.

Generated kernels name their values after the program's nodes (``layer_norm_3``) and their
functions after the region (``tpg_rows_r7_k0``), so twelve identical layer norms are twelve
sources to Triton, which compiles each (about a second apiece). :func:`canonical` renames every
local identifier by order of first appearance and drops comments; what must keep its name
stays: attributes (``tl.load``), keyword-argument names (``mask=``), constexpr parameters
(upper case: ``BLOCK_N``, passed by name at launch), keywords and builtins. The function
becomes ``<kind>_<digest>``, so profiles still tell kernel kinds apart.

>>> name, text = canonical("tpg_pw_r3_k0", src)   # doctest: +SKIP
"""

from __future__ import annotations

import builtins
import hashlib
import io
import keyword
import re
import tokenize
from typing import Dict, List, Set, Tuple

_KEEP = frozenset({"tl", "triton", "libdevice"}) | frozenset(dir(builtins))
_PLACEHOLDER = "__tpg_kernel__"


def _keyword_arguments(tokens: List[tokenize.TokenInfo]) -> Set[str]:
    """Names used as ``name=value`` inside parentheses (call keywords, defaults)."""
    found, depth = set(), 0
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
        elif tok.type == tokenize.NAME and depth > 0 and i + 1 < len(tokens):
            nxt = tokens[i + 1]
            if nxt.type == tokenize.OP and nxt.string == "=":
                found.add(tok.string)
    return found


def _renamable(tok: tokenize.TokenInfo, prev: tokenize.TokenInfo, keep: Set[str]) -> bool:
    name = tok.string
    return (tok.type == tokenize.NAME and not keyword.iskeyword(name) and name not in keep
            and name not in _KEEP and not name.isupper()
            and not (prev is not None and prev.type == tokenize.OP and prev.string == "."))


def canonical(name: str, text: str) -> Tuple[str, str]:
    """``(function name, source)`` of ``text`` (defining ``name``) in canonical form; the
    input unchanged if it does not tokenize."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return name, text
    keep = _keyword_arguments(tokens)
    mapping: Dict[str, str] = {name: _PLACEHOLDER}
    out: List[Tuple[int, str]] = []
    prev = None
    for tok in tokens:
        if tok.type == tokenize.COMMENT:
            continue
        if tok.type == tokenize.NL and (not out or out[-1][0] in (tokenize.NL, tokenize.NEWLINE)):
            continue  # blank lines (comment lines included) carry no meaning
        string = tok.string
        if _renamable(tok, prev, keep):
            string = mapping.setdefault(string, f"_c{len(mapping)}")
        out.append((tok.type, string))
        if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            prev = tok
    body = tokenize.untokenize(out)
    kind = re.sub(r"_r\d+_k\d+$", "", name) or "tpg"
    final = f"{kind}_{hashlib.sha256(body.encode()).hexdigest()[:12]}"
    return final, body.replace(_PLACEHOLDER, final)
