"""Types of the C trace scanner (nsbridge/parse/_scan.c)."""

from typing import Optional

def scan(data: bytes, end: int = ...) -> Optional[
        tuple[int, tuple[bytes, ...], tuple[bytes, ...], tuple[list[bytes], ...]]]: ...
