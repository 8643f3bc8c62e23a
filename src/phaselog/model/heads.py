"""Signed tree heads and the Ed25519 keys that sign them (docs/anchoring.md).

A head says "ticket T's history had ``size`` entries and Merkle root ``root`` at ``at``", signed
by the key ``key_id``. The signature is Ed25519 over the head's canonical JSON (every field but
``signature``; keys sorted, no spaces, UTF-8). ``key_id`` is the hex SHA-256 of the raw 32-byte
public key. Key files are PEM: the private key PKCS#8 (mode 0600, created, never overwritten),
the public key SubjectPublicKeyInfo beside it (``FILE.pub``). Keys never live in a store.

The ``cryptography`` package (extra ``proofs``) is imported only by the functions that sign or
check, so ``phaselog --help`` and ``phaselog read`` never load it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from phaselog.model.errors import InvalidRecord, UsageError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "HEAD_VERSION",
    "Head",
    "canonical_json",
    "key_id_of",
    "load_private_key",
    "load_public_key",
    "make_key_pair",
    "public_key_pem",
    "sign_head",
    "signature_ok",
]

HEAD_VERSION = 1
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX128 = re.compile(r"[0-9a-f]{128}")
_FIELDS = ("schema_version", "ticket_id", "size", "root", "at", "key_id")


def canonical_json(value: Any) -> bytes:
    """The bytes a head's signature covers: sorted keys, no spaces, UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class Head:
    """A signed tree head: the size and root of a ticket's history at a time, and who signed it."""

    ticket_id: str
    size: int
    root: str  # hex
    at: str  # ISO-8601 UTC
    key_id: str  # hex SHA-256 of the raw public key
    signature: str = ""  # hex Ed25519 signature over :meth:`signed_bytes`
    schema_version: int = HEAD_VERSION

    def unsigned(self) -> dict[str, Any]:
        """The fields the signature covers."""
        return {f: getattr(self, f) for f in _FIELDS}

    def signed_bytes(self) -> bytes:
        """The canonical JSON the signature is over."""
        return canonical_json(self.unsigned())

    def to_json(self) -> dict[str, Any]:
        """The head as it is written to a witness and printed."""
        return {**self.unsigned(), "signature": self.signature}

    @classmethod
    def from_json(cls, data: Any) -> Head:
        """Parse a head; InvalidRecord naming the field and the rule when it is malformed."""
        if not isinstance(data, dict):
            raise InvalidRecord("a head must be a JSON object", field="head", rule="type")
        if data.get("schema_version") != HEAD_VERSION:
            raise InvalidRecord(
                f"schema_version: must be {HEAD_VERSION}", field="schema_version", rule="schema_version"
            )
        ticket, size, root, at = data.get("ticket_id"), data.get("size"), data.get("root"), data.get("at")
        key_id, sig = data.get("key_id"), data.get("signature")
        if not isinstance(ticket, str) or not ticket:
            raise InvalidRecord("ticket_id: must be a non-empty string", field="ticket_id", rule="required")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidRecord("size: must be an integer >= 0", field="size", rule="size")
        for name, value in (("root", root), ("key_id", key_id)):
            if not isinstance(value, str) or not _HEX64.fullmatch(value):
                raise InvalidRecord(f"{name}: must be 64 lowercase hex digits", field=name, rule="hash")
        if not isinstance(at, str) or not at:
            raise InvalidRecord("at: must be an ISO-8601 time", field="at", rule="required")
        if not isinstance(sig, str) or not _HEX128.fullmatch(sig):
            raise InvalidRecord("signature: must be 128 lowercase hex digits", field="signature", rule="signature")
        return cls(ticket, size, root, at, key_id, sig)  # type: ignore[arg-type]  # checked above


def key_id_of(public: Ed25519PublicKey) -> str:
    """The key's id: hex SHA-256 of its raw 32 bytes."""
    from cryptography.hazmat.primitives import serialization  # lazy: only signing and checking need it

    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def public_key_pem(public: Ed25519PublicKey) -> bytes:
    """The public key as PEM (SubjectPublicKeyInfo)."""
    from cryptography.hazmat.primitives import serialization  # lazy: only signing and checking need it

    return public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _create(path: Path, data: bytes, mode: int) -> None:
    # O_EXCL: a key file is never overwritten (losing a key loses the ability to sign as it).
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        os.fchmod(fd, mode)  # the umask must not widen or narrow it
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def make_key_pair(out: Path) -> tuple[Path, Path, str]:
    """Write a new Ed25519 private key to ``out`` (0600) and its public key to ``out.pub``.

    Returns (private path, public path, key id). UsageError if either file exists.
    """
    from cryptography.hazmat.primitives import serialization  # lazy: only `keys init` makes keys
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # lazy: as above

    pub_path = out.with_name(out.name + ".pub")
    for p in (out, pub_path):
        if p.exists() or p.is_symlink():
            raise UsageError(
                f"{p} exists: keys are never overwritten; pick another --out", field="--out", rule="exists"
            )
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    _create(out, pem, 0o600)
    _create(pub_path, public_key_pem(key.public_key()), 0o644)
    return out, pub_path, key_id_of(key.public_key())


def load_private_key(path: str | Path) -> Ed25519PrivateKey:
    """Read a private key file; UsageError naming ``--key`` when it is not an Ed25519 private key."""
    from cryptography.hazmat.primitives import serialization  # lazy: only signing needs it
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # lazy: as above

    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(f"--key {path}: not a readable PEM private key ({exc})", field="--key", rule="key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(f"--key {path}: not an Ed25519 private key", field="--key", rule="key")
    return key


def load_public_key(data: bytes, *, source: str) -> Ed25519PublicKey:
    """Parse a PEM public key (or the public half of a private key file); UsageError if it is neither."""
    from cryptography.hazmat.primitives import serialization  # lazy: only checking needs it
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey  # lazy: as above

    try:
        if b"PRIVATE KEY" in data:
            private = serialization.load_pem_private_key(data, password=None)
            if isinstance(private, Ed25519PrivateKey):
                return private.public_key()
            raise ValueError("not Ed25519")
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{source}: not a PEM Ed25519 key ({exc})", field="--key", rule="key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise UsageError(f"{source}: not an Ed25519 public key", field="--key", rule="key")
    return key


def sign_head(key: Ed25519PrivateKey, ticket_id: str, size: int, root: bytes, at: str) -> Head:
    """A head for (ticket, size, root, at), signed with ``key``."""
    unsigned = Head(ticket_id, size, root.hex(), at, key_id_of(key.public_key()))
    return Head(**{**unsigned.__dict__, "signature": key.sign(unsigned.signed_bytes()).hex()})


def signature_ok(head: Head, public: Ed25519PublicKey) -> bool:
    """Is ``head`` signed by ``public`` (its key id matches and the signature checks)?"""
    from cryptography.exceptions import InvalidSignature  # lazy: only checking needs it

    if head.key_id != key_id_of(public):
        return False
    try:
        public.verify(bytes.fromhex(head.signature), head.signed_bytes())
    except (InvalidSignature, ValueError):
        return False
    return True
