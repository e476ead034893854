"""CEL tokens: numbers, strings and bytes with every escape, identifiers, punctuation."""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.cel.errors import CompileError
from engine.cel.types.values import INT64_MAX, UINT64_MAX, UInt


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "int", "uint", "double", "string", "bytes", "ident", "eof", or the punctuation itself
    value: object
    offset: int


_PUNCT = (
    "&&", "||", "==", "!=", "<=", ">=", ".?", "[?",
    "<", ">", "+", "-", "*", "/", "%", "!", "?", ":", ".", ",", "(", ")", "[", "]", "{", "}",
)
_SPACE = re.compile(r"(?:[ \t\n\r\f]+|//[^\n]*)+")
_IDENT = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
_NUMBER = re.compile(
    r"(?P<hex>0[xX][0-9a-fA-F]+)(?P<hexu>[uU])?"
    r"|(?P<float>(?:[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+|\.[0-9]+(?:[eE][+-]?[0-9]+)?))"
    r"|(?P<int>[0-9]+)(?P<intu>[uU])?"
)
_STRING_START = re.compile(r"(?P<prefix>[rRbB]{0,2})(?P<quote>'''|\"\"\"|'|\")")
_SIMPLE_ESCAPES = {
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    "\\": "\\", "'": "'", '"': '"', "`": "`", "?": "?",
}
# Once the lexer has read an int literal this big, unary minus may still make it fit.
INT64_MIN_MAGNITUDE = INT64_MAX + 1


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos, end = 0, len(text)
    while True:
        m = _SPACE.match(text, pos)
        if m:
            pos = m.end()
        if pos >= end:
            tokens.append(Token("eof", None, pos))
            return tokens
        ch = text[pos]
        m = _STRING_START.match(text, pos)
        if m and (m.group("prefix") == "" or ch in "rRbB"):
            prefix = m.group("prefix").lower()
            if len(prefix) == 2 and prefix not in ("rb", "br"):
                m = None
            if m:
                token, pos = _string(text, pos, m.end(), prefix, m.group("quote"))
                tokens.append(token)
                continue
        if ch.isdigit() or (ch == "." and pos + 1 < end and text[pos + 1].isdigit()):
            token, pos = _number(text, pos)
            tokens.append(token)
            continue
        m = _IDENT.match(text, pos)
        if m:
            tokens.append(Token("ident", m.group(), pos))
            pos = m.end()
            continue
        if ch == "`":
            close = text.find("`", pos + 1)
            if close < 0:
                raise CompileError("unterminated quoted identifier", text=text, offset=pos)
            tokens.append(Token("quoted_ident", text[pos + 1 : close], pos))
            pos = close + 1
            continue
        for p in _PUNCT:
            if text.startswith(p, pos):
                tokens.append(Token(p, p, pos))
                pos += len(p)
                break
        else:
            raise CompileError(f"unexpected character {ch!r}", text=text, offset=pos)


def _number(text: str, pos: int) -> tuple[Token, int]:
    m = _NUMBER.match(text, pos)
    assert m is not None  # the caller saw a digit
    if m.group("hex"):
        value = int(m.group("hex"), 16)
        unsigned = bool(m.group("hexu"))
    elif m.group("float"):
        return Token("double", float(m.group("float")), pos), m.end()
    else:
        value = int(m.group("int"))
        unsigned = bool(m.group("intu"))
    nxt = m.end()
    if nxt < len(text) and (text[nxt].isalnum() or text[nxt] == "_"):
        raise CompileError("invalid number literal", text=text, offset=pos)
    if unsigned:
        if value > UINT64_MAX:
            raise CompileError("uint literal out of range", text=text, offset=pos)
        return Token("uint", UInt(value), pos), nxt
    if value > INT64_MIN_MAGNITUDE:
        raise CompileError("int literal out of range", text=text, offset=pos)
    return Token("int", value, pos), nxt


def _string(text: str, start: int, pos: int, prefix: str, quote: str) -> tuple[Token, int]:
    raw, is_bytes = "r" in prefix, "b" in prefix
    triple = len(quote) == 3
    out: list[str] = []
    end = len(text)
    while True:
        if pos >= end:
            raise CompileError("unterminated string literal", text=text, offset=start)
        if text.startswith(quote, pos):
            pos += len(quote)
            break
        ch = text[pos]
        if not triple and ch in "\r\n":
            raise CompileError("newline in single-quoted string literal", text=text, offset=pos)
        if ch == "\\" and raw:
            # A raw string keeps the backslash, but a quote after it does not end the string.
            out.append(text[pos : pos + 2])
            pos += 2
            continue
        if ch == "\\":
            piece, pos = _escape(text, pos, is_bytes)
            out.append(piece)
            continue
        out.append(ch)
        pos += 1
    body = "".join(out)
    if is_bytes:
        # Escapes produced code points < 256 standing for single bytes; other text is UTF-8.
        data = bytearray()
        for part in _split_bytes_marks(body):
            data += part
        return Token("bytes", bytes(data), start), pos
    return Token("string", body, start), pos


_BYTE_MARK = "\x00\uffff"  # brackets a raw byte produced by an escape inside a bytes literal


def _split_bytes_marks(body: str) -> list[bytes]:
    parts: list[bytes] = []
    i = 0
    while i < len(body):
        j = body.find(_BYTE_MARK, i)
        if j < 0:
            parts.append(body[i:].encode("utf-8"))
            break
        parts.append(body[i:j].encode("utf-8"))
        parts.append(bytes([ord(body[j + 2])]))
        i = j + 3
    return parts


def _escape(text: str, pos: int, is_bytes: bool) -> tuple[str, int]:
    if pos + 1 >= len(text):
        raise CompileError("unterminated escape sequence", text=text, offset=pos)
    c = text[pos + 1]
    if c in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[c], pos + 2
    if c in "xX":
        digits, width = text[pos + 2 : pos + 4], 2
        return _code(text, pos, digits, width, 16, is_bytes, byte=True), pos + 2 + width
    if c in "uU":
        width = 4 if c == "u" else 8
        if is_bytes:
            raise CompileError("unicode escape in bytes literal", text=text, offset=pos)
        digits = text[pos + 2 : pos + 2 + width]
        return _code(text, pos, digits, width, 16, is_bytes, byte=False), pos + 2 + width
    if c in "0123":
        digits = text[pos + 1 : pos + 4]
        return _code(text, pos, digits, 3, 8, is_bytes, byte=True), pos + 4
    raise CompileError(f"invalid escape sequence \\{c}", text=text, offset=pos)


def _code(text: str, pos: int, digits: str, width: int, base: int, is_bytes: bool, *, byte: bool) -> str:
    valid = "0123456789abcdefABCDEF" if base == 16 else "01234567"
    if len(digits) != width or any(d not in valid for d in digits):
        raise CompileError("invalid escape sequence", text=text, offset=pos)
    value = int(digits, base)
    if is_bytes and byte:
        return _BYTE_MARK + chr(value)
    if 0xD800 <= value <= 0xDFFF or value > 0x10FFFF:
        raise CompileError("invalid unicode code point in escape", text=text, offset=pos)
    return chr(value)
