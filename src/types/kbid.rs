//! Content identifiers: the first 128 bits of SHA-256, lowercase Crockford base32 (26 chars).

use sha2::{Digest, Sha256};

use crate::error::{KbError, Result};

const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";
/// Length of a kbid in characters.
pub const KBID_LEN: usize = 26;

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// Lowercase hex of a digest (used for stored checksums).
pub fn hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    s
}

/// Encode the first 16 bytes of a digest as 26 Crockford base32 characters, most
/// significant bit first, the last character padded with two zero bits.
pub fn encode_kbid(digest: &[u8; 32]) -> String {
    let value = u128::from_be_bytes(digest[..16].try_into().expect("16 bytes"));
    // 130 bits of output: shift left by 2 so the 128 bits fill the top of 26 quintets.
    let mut out = String::with_capacity(KBID_LEN);
    for i in 0..KBID_LEN {
        let shift = 125i32 - 5 * i as i32; // bit position of this quintet's top bit, in a 130-bit value
        let quintet = if shift >= 2 {
            (value >> (shift - 2)) & 31
        } else {
            (value << (2 - shift)) & 31
        };
        out.push(ALPHABET[quintet as usize] as char);
    }
    out
}

/// The 16 digest bytes a kbid encodes (None when `s` is not a kbid): `encode_kbid`'s inverse.
pub fn kbid_bytes(s: &str) -> Option<[u8; 16]> {
    /// Each byte's quintet (255: not in the alphabet).
    const QUINTETS: [u8; 256] = {
        let mut table = [255u8; 256];
        let mut i = 0;
        while i < ALPHABET.len() {
            table[ALPHABET[i] as usize] = i as u8;
            i += 1;
        }
        table
    };
    let bytes = s.as_bytes();
    if bytes.len() != KBID_LEN {
        return None;
    }
    let mut value: u128 = 0;
    for &c in &bytes[..KBID_LEN - 1] {
        let quintet = QUINTETS[c as usize];
        if quintet == 255 {
            return None;
        }
        value = value << 5 | u128::from(quintet);
    }
    // The last character carries 3 data bits above 2 zero padding bits.
    let last = QUINTETS[bytes[KBID_LEN - 1] as usize];
    if last == 255 || last & 3 != 0 {
        return None;
    }
    value = value << 3 | u128::from(last >> 2);
    Some(value.to_be_bytes())
}

/// The kbid of preprocessed content bytes.
pub fn kbid_of(bytes: &[u8]) -> String {
    encode_kbid(&sha256(bytes))
}

/// Whether `s` has the shape of a kbid (26 lowercase Crockford characters, valid padding).
pub fn is_kbid(s: &str) -> bool {
    kbid_bytes(s).is_some()
}

/// Validate a user-supplied kbid, naming `field` in the error.
pub fn validate_kbid(field: &str, s: &str) -> Result<()> {
    if is_kbid(s) {
        Ok(())
    } else {
        Err(KbError::invalid(
            field,
            format!(
                "'{}' is not a kbid (expected 26 lowercase Crockford base32 characters)",
                crate::text::preview(s, 40)
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kbid_gives_back_the_digest_bytes_it_encodes() {
        for text in ["", "a", "hello world", "ünïcödé"] {
            let digest = sha256(text.as_bytes());
            let kbid = encode_kbid(&digest);
            assert_eq!(kbid_bytes(&kbid).unwrap(), digest[..16], "{text:?}");
        }
        let mut ones = [0xffu8; 32];
        assert_eq!(kbid_bytes(&encode_kbid(&ones)).unwrap(), ones[..16]);
        ones[..16].fill(0);
        assert_eq!(kbid_bytes(&encode_kbid(&ones)).unwrap(), [0; 16]);
        assert_eq!(kbid_bytes("not a kbid"), None);
        let kbid = kbid_of(b"x");
        let padded_wrong = format!("{}1", &kbid[..KBID_LEN - 1]);
        assert_eq!(kbid_bytes(&padded_wrong), None, "padding bits set");
    }

    #[test]
    fn kbid_is_26_crockford_chars_and_stable() {
        let id = kbid_of(b"hello");
        assert_eq!(id.len(), 26);
        assert!(is_kbid(&id));
        // SHA-256("hello") = 2cf24dba5fb0a30e26e83b2ac5b9e29e...; first 128 bits in base32.
        assert_eq!(id, "5ks4vejzp2hgw9q87cncbef2kr");
    }

    #[test]
    fn encoding_matches_bitwise_reference() {
        for input in [&b""[..], b"a", b"kbdb", &[0xff; 40]] {
            let d = sha256(input);
            // Reference: build the bit string and cut it into quintets.
            let mut bits = Vec::new();
            for byte in &d[..16] {
                for i in (0..8).rev() {
                    bits.push((byte >> i) & 1);
                }
            }
            bits.extend([0, 0]);
            let expected: String = bits
                .chunks(5)
                .map(|c| ALPHABET[c.iter().fold(0usize, |a, b| a * 2 + *b as usize)] as char)
                .collect();
            assert_eq!(encode_kbid(&d), expected);
        }
    }

    #[test]
    fn rejects_malformed_kbids() {
        assert!(!is_kbid("short"));
        assert!(!is_kbid("5KS4VEJZP2HGW9Q87CNCBEF2KR"));
        assert!(!is_kbid("5ks4vejzp2hgw9q87cncbef2ku")); // 'u' is not Crockford
        assert!(!is_kbid("5ks4vejzp2hgw9q87cncbef2k1")); // padding bits set
    }
}
