#![no_main]
//! Acceptance cards: any text either loads or gives an error naming the file; never a
//! panic.
use burnin::card::Card;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Err(e) = Card::parse(s, "fuzz.toml") {
            assert!(format!("{e:#}").starts_with("fuzz.toml"), "{e:#}");
        }
    }
});
