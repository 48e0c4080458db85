//! Newtypes for quantities that are easy to mix up: byte counts and bandwidths.
//!
//! Sizes follow nccl-tests: a bare number is bytes and the suffixes K, M, G, T are
//! powers of 1024 (`KiB`, `KB` and `K` all mean 1024 bytes, as users of `-b 64K -e 8G`
//! expect). Bandwidths follow nccl-tests too: GB/s means 1e9 bytes per second.
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A number of bytes. Serialised as an integer; read from an integer or a size
/// string ("64K", "1GiB") so card and topology files can say either.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct Bytes(pub u64);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize, schemars::JsonSchema)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(n) => Ok(Bytes(n)),
            Raw::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

impl Bytes {
    pub const fn get(self) -> u64 {
        self.0
    }
    pub fn as_usize(self) -> usize {
        self.0 as usize
    }
}

/// Why a size string was refused; the message says what a good one looks like.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad size '{input}': {why} (examples: 8, 64K, 1MiB, 8G)")]
pub struct SizeError {
    pub input: String,
    pub why: &'static str,
}

impl FromStr for Bytes {
    type Err = SizeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| SizeError {
            input: s.to_string(),
            why,
        };
        let t = s.trim();
        if t.is_empty() {
            return Err(err("empty"));
        }
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        if num.is_empty() {
            return Err(err("no number"));
        }
        let shift = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            "t" | "tb" | "tib" => 40,
            _ => return Err(err("unknown unit (use B, K, M, G or T)")),
        };
        let value: u64 = if num.contains('.') {
            let f: f64 = num.parse().map_err(|_| err("not a number"))?;
            let v = f * (1u64 << shift) as f64;
            if !(v.is_finite() && v >= 0.0 && v < u64::MAX as f64) || v.fract() != 0.0 {
                return Err(err("not a whole number of bytes"));
            }
            v as u64
        } else {
            let n: u64 = num.parse().map_err(|_| err("number too large"))?;
            n.checked_mul(1u64 << shift)
                .ok_or_else(|| err("number too large"))?
        };
        Ok(Bytes(value))
    }
}

impl fmt::Display for Bytes {
    /// The largest binary unit that divides the value exactly: 8B, 64KiB, 1MiB, 8GiB.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u32); 4] = [("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)];
        let v = self.0;
        for (name, shift) in UNITS {
            let unit = 1u64 << shift;
            if v >= unit && v % unit == 0 {
                return write!(f, "{}{}", v / unit, name);
            }
        }
        write!(f, "{v}B")
    }
}

/// Gigabytes (1e9 bytes) per second, the unit of nccl-tests' algbw and busbw.
#[derive(
    Clone, Copy, Debug, PartialEq, PartialOrd, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct GBps(pub f64);

impl GBps {
    /// Bytes moved in `seconds`, in GB/s; zero when no time was measured. Divided in
    /// nccl-tests' order (bytes / 1e9 / seconds) so both print the same last digit
    /// (tests/nccl_tests_parity.rs).
    pub fn from_bytes_secs(bytes: u64, seconds: f64) -> GBps {
        if seconds > 0.0 {
            GBps(bytes as f64 / 1e9 / seconds)
        } else {
            GBps(0.0)
        }
    }
}

impl fmt::Display for GBps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.2}", self.0)
    }
}

/// "60", "60s", "2m", "1h" as seconds.
pub fn parse_seconds(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, 's')) => (&t[..i], 1.0),
        Some((i, 'm')) => (&t[..i], 60.0),
        Some((i, 'h')) => (&t[..i], 3600.0),
        _ => (t, 1.0),
    };
    match num.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 && v.is_finite() => Ok(v * mult),
        _ => Err(format!(
            "'{text}' is not a duration (seconds, or 90s, 2m, 1h)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nccl_tests_style_sizes() {
        assert_eq!("8".parse::<Bytes>().unwrap(), Bytes(8));
        assert_eq!("8B".parse::<Bytes>().unwrap(), Bytes(8));
        assert_eq!("64K".parse::<Bytes>().unwrap(), Bytes(65536));
        assert_eq!("1MiB".parse::<Bytes>().unwrap(), Bytes(1 << 20));
        assert_eq!("8G".parse::<Bytes>().unwrap(), Bytes(8 << 30));
        assert_eq!("1GB".parse::<Bytes>().unwrap(), Bytes(1 << 30));
        assert_eq!("0.5K".parse::<Bytes>().unwrap(), Bytes(512));
        assert_eq!(" 2m ".parse::<Bytes>().unwrap(), Bytes(2 << 20));
    }

    #[test]
    fn refuses_bad_sizes_with_a_reason() {
        for bad in [
            "",
            "K",
            "12Q",
            "-1",
            "1.3B",
            "99999999999999999999",
            "16777216T",
        ] {
            let e = bad.parse::<Bytes>().unwrap_err();
            assert!(e.to_string().contains("bad size"), "{bad}: {e}");
        }
    }

    #[test]
    fn prints_in_the_largest_exact_unit() {
        assert_eq!(Bytes(8).to_string(), "8B");
        assert_eq!(Bytes(1536).to_string(), "1536B");
        assert_eq!(Bytes(65536).to_string(), "64KiB");
        assert_eq!(Bytes(8 << 30).to_string(), "8GiB");
        for s in ["8B", "64KiB", "1MiB", "8GiB"] {
            assert_eq!(s.parse::<Bytes>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn reads_integers_and_size_strings() {
        assert_eq!(serde_json::from_str::<Bytes>("1024").unwrap(), Bytes(1024));
        assert_eq!(
            serde_json::from_str::<Bytes>("\"1G\"").unwrap(),
            Bytes(1 << 30)
        );
        assert!(serde_json::from_str::<Bytes>("\"1Q\"")
            .unwrap_err()
            .to_string()
            .contains("bad size"));
        assert_eq!(serde_json::to_string(&Bytes(8)).unwrap(), "8");
    }

    #[test]
    fn bandwidth_is_decimal_gigabytes() {
        assert_eq!(GBps::from_bytes_secs(2_000_000_000, 1.0).0, 2.0);
        assert_eq!(GBps::from_bytes_secs(10, 0.0).0, 0.0);
    }
}
