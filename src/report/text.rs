//! Text every section of the report shares ([`human_bytes`]). A leaf of `report`: it
//! imports no sibling, so the sections (`doc`, `gpu`, `replay`) use it without
//! importing each other.

/// "32.1 MiB": sizes that are not a whole unit, for reading.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [(&str, f64); 4] = [
        ("TiB", 1099511627776.0),
        ("GiB", 1073741824.0),
        ("MiB", 1048576.0),
        ("KiB", 1024.0),
    ];
    for (name, size) in UNITS {
        if b as f64 >= size {
            return format!("{:.1} {name}", b as f64 / size);
        }
    }
    format!("{b} B")
}
