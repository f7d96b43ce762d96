//! Synapse's signing key file, read as Synapse reads it (`synapse/config/key.py` with
//! `signedjson.key.read_signing_keys`): blank lines are skipped, every other line is
//! `<algorithm> <key id> <base64 seed>` split on whitespace, the algorithm is `ed25519` (the only
//! one signedjson decodes), the seed is (unpadded) standard base64 of 32 bytes, and a file
//! without a key is refused. Errors name the line number and what is wrong with it, never
//! anything of its content; a key shows as `ed25519:a_AbCd` (algorithm and key id: what Synapse
//! publishes at `/_matrix/key/v2/server`), its seed nowhere.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::{DecodePaddingMode, general_purpose};

/// The only algorithm signedjson decodes.
pub const ED25519: &str = "ed25519";

/// One key of the file. `Debug` and `Display` show `algorithm:key id`, never the seed.
#[derive(Clone, PartialEq, Eq)]
pub struct SigningKey {
    /// `ed25519`.
    pub algorithm: String,
    /// The key id (Synapse's `version`), e.g. `a_AbCd`.
    pub key_id: String,
    seed: Vec<u8>,
}

impl fmt::Display for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.algorithm, self.key_id)
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey({self}, seed <redacted>)")
    }
}

/// The keys of a file, in its order (Synapse signs with the first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyFile {
    /// The keys.
    pub keys: Vec<SigningKey>,
}

impl fmt::Display for KeyFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ids: Vec<String> = self.keys.iter().map(ToString::to_string).collect();
        f.write_str(&ids.join(", "))
    }
}

/// Why a text is not a signing key file. Names a line by number and what is wrong, never
/// what it holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyFileError {
    /// The bytes are not UTF-8 text.
    #[error("it is not UTF-8 text")]
    NotText,
    /// No line holds a key.
    #[error("it holds no key (empty, or blank lines only)")]
    Empty,
    /// A line has not three fields.
    #[error(
        "line {line}: {fields} whitespace-separated fields, expected 3 (<algorithm> <key id> <base64 seed>)"
    )]
    Fields {
        /// 1-based line number.
        line: usize,
        /// How many fields it has.
        fields: usize,
    },
    /// The algorithm is not `ed25519`.
    #[error("line {line}: the algorithm is not ed25519, the only one Synapse reads")]
    Algorithm {
        /// 1-based line number.
        line: usize,
    },
    /// The key id has other characters than letters, digits and `_`.
    #[error("line {line}: the key id is not letters, digits and '_' only")]
    KeyId {
        /// 1-based line number.
        line: usize,
    },
    /// The seed is not base64.
    #[error("line {line}: the seed is not base64")]
    NotBase64 {
        /// 1-based line number.
        line: usize,
    },
    /// The seed is not 32 bytes.
    #[error("line {line}: the seed is {len} bytes, an ed25519 seed is 32")]
    SeedLength {
        /// 1-based line number.
        line: usize,
        /// Its length.
        len: usize,
    },
}

/// Standard base64, padding optional (what `unpaddedbase64.decode_base64` accepts).
const SEED_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// Reads a key file's bytes as Synapse does.
pub fn parse(bytes: &[u8]) -> Result<KeyFile, KeyFileError> {
    let text = std::str::from_utf8(bytes).map_err(|_| KeyFileError::NotText)?;
    let mut keys = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        let [algorithm, key_id, seed] = fields[..] else {
            return Err(KeyFileError::Fields {
                line: line_no,
                fields: fields.len(),
            });
        };
        if algorithm != ED25519 {
            return Err(KeyFileError::Algorithm { line: line_no });
        }
        if !key_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(KeyFileError::KeyId { line: line_no });
        }
        let seed = SEED_BASE64
            .decode(seed)
            .map_err(|_| KeyFileError::NotBase64 { line: line_no })?;
        if seed.len() != 32 {
            return Err(KeyFileError::SeedLength {
                line: line_no,
                len: seed.len(),
            });
        }
        keys.push(SigningKey {
            algorithm: algorithm.to_string(),
            key_id: key_id.to_string(),
            seed,
        });
    }
    if keys.is_empty() {
        return Err(KeyFileError::Empty);
    }
    Ok(KeyFile { keys })
}

/// A key file line for `seed` (tests and benchmarks write key files with it).
pub fn line(key_id: &str, seed: &[u8; 32]) -> String {
    format!(
        "{ED25519} {key_id} {}",
        general_purpose::STANDARD_NO_PAD.encode(seed)
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A key Synapse's `generate_signing_key` wrote (a test key, used nowhere).
    const GENERATED: &str = "ed25519 a_VPhV TbF/sqoLUV9q3RlgHIDYxOXmug9LhlPG1hCoAhayYf4\n";

    #[test]
    fn a_key_synapse_generated_is_read_and_shown_by_algorithm_and_id_only() {
        let file = parse(GENERATED.as_bytes()).unwrap();
        assert_eq!(file.keys.len(), 1);
        assert_eq!(file.to_string(), "ed25519:a_VPhV");
        let debug = format!("{file:?}");
        assert!(!debug.contains("TbF/sq"), "{debug}");
        assert!(debug.contains("a_VPhV"), "{debug}");
    }

    #[test]
    fn trailing_whitespace_padding_and_blank_lines_do_not_change_the_key() {
        let a = parse(GENERATED.as_bytes()).unwrap();
        let padded = "\n  ed25519\ta_VPhV   TbF/sqoLUV9q3RlgHIDYxOXmug9LhlPG1hCoAhayYf4=  \r\n\n";
        assert_eq!(parse(padded.as_bytes()).unwrap(), a);
        let other = parse(line("a_VPhV", &[7; 32]).as_bytes()).unwrap();
        assert_ne!(other, a, "the same id with another seed is another key");
        let two = format!("{GENERATED}{}\n", line("b_2", &[1; 32]));
        let two = parse(two.as_bytes()).unwrap();
        assert_eq!(two.to_string(), "ed25519:a_VPhV, ed25519:b_2");
        assert_ne!(two, a);
    }

    #[test]
    fn a_file_that_does_not_parse_names_the_line_never_its_content() {
        let cases: [(&str, &str); 7] = [
            ("", "it holds no key (empty, or blank lines only)"),
            ("\n \n", "it holds no key (empty, or blank lines only)"),
            (
                "TbF/sqoLUV9q3RlgHIDYxOXmug9LhlPG1hCoAhayYf4\n",
                "line 1: 1 whitespace-separated fields, expected 3 (<algorithm> <key id> <base64 seed>)",
            ),
            (
                "ed25519 a_VPhV TbF/sqoLUV9q3RlgHIDYxOXmug9LhlPG1hCoAhayYf4\nrsa a_x TbF/sqoLUV9q3RlgHIDYxOXmug9LhlPG1hCoAhayYf4\n",
                "line 2: the algorithm is not ed25519, the only one Synapse reads",
            ),
            (
                "ed25519 a:b TbF/sqoLUV9q3RlgHIDYxOXmug9LhlPG1hCoAhayYf4",
                "line 1: the key id is not letters, digits and '_' only",
            ),
            ("ed25519 a_x TbF/sq!!", "line 1: the seed is not base64"),
            (
                "ed25519 a_x TbF/sqoL",
                "line 1: the seed is 6 bytes, an ed25519 seed is 32",
            ),
        ];
        for (text, want) in cases {
            let e = parse(text.as_bytes()).unwrap_err().to_string();
            assert_eq!(e, want, "{text:?}");
            assert!(!e.contains("TbF/sq"), "{e}");
        }
        assert_eq!(parse(&[0xff, 0xfe]).unwrap_err(), KeyFileError::NotText);
    }
}
