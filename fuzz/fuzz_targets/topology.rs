#![no_main]
//! Topology files: any text either loads or gives an error naming the file; never a
//! panic. Loaded files answer every expectation query without panicking.
use burnin::kinds::CollKind;
use burnin::topology::file::Topology;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        match Topology::parse(s, "fuzz.toml") {
            Ok(t) => {
                for tier in ["world", "intra", "inter", "rails", "pairs"] {
                    for k in CollKind::ALL {
                        let _ = t.expectation(tier, k, 16, 2);
                        let _ = t.expectation(tier, k, 1, 1);
                    }
                }
                let _ = t.ranks_per_node();
            }
            Err(e) => assert!(format!("{e:#}").starts_with("fuzz.toml"), "{e:#}"),
        }
    }
});
