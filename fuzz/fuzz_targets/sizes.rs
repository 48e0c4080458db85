#![no_main]
//! Size strings ("64K", "1MiB"): never panic; whatever parses prints and re-parses
//! to the same value when printed in an exact unit.
use burnin::units::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(b) = s.parse::<Bytes>() {
            let printed = b.to_string();
            let again: Bytes = printed.parse().expect("a printed size parses");
            assert_eq!(again, b, "{s:?} -> {printed}");
        }
    }
});
