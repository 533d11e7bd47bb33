"""The certificate key and the encryption of the shared control-plane certificates
(`ephemera.cli.uploadcerts`): AES-256-GCM with the nonce first, a wrong key refused."""

from __future__ import annotations

import pytest

from ephemera.cli.controlplane import ControlPlaneError
from ephemera.cli.uploadcerts import (
    NONCE_BYTES,
    decrypt,
    encrypt,
    new_certificate_key,
    parse_certificate_key,
)


def test_a_certificate_key_is_64_hex_digits() -> None:
    text = new_certificate_key()
    assert len(text) == 64 and parse_certificate_key(text) == bytes.fromhex(text)
    assert new_certificate_key() != text
    for bad in ("", "zz" * 32, "ab" * 31, "ab" * 33):
        with pytest.raises(ValueError, match="64 hex digits"):
            parse_certificate_key(bad)


def test_encrypted_bytes_open_only_with_their_key() -> None:
    key, other = (parse_certificate_key(new_certificate_key()) for _ in range(2))
    secret = b"-----BEGIN EC PRIVATE KEY-----\n..."
    blob = encrypt(secret, key)
    assert secret not in blob and len(blob) == NONCE_BYTES + len(secret) + 16
    assert encrypt(secret, key)[:NONCE_BYTES] != blob[:NONCE_BYTES]  # a fresh nonce each
    assert decrypt(blob, key) == secret
    with pytest.raises(ControlPlaneError, match="does not decrypt"):
        decrypt(blob, other)
    with pytest.raises(ControlPlaneError, match="does not decrypt"):
        decrypt(blob[:-1] + bytes([blob[-1] ^ 1]), key)
    with pytest.raises(ControlPlaneError, match="truncated"):
        decrypt(blob[:NONCE_BYTES], key)
