//! The program's integration tests, one module per area, compiled as ONE test binary: each
//! binary links LiteSVM, the agave runtime and the program again, so one binary instead of one
//! per file keeps `cargo test` quick after a change to the program. Cargo.toml turns off test
//! auto-discovery (`autotests = false`), so a new file here is compiled only once it is listed
//! below; `every_test_file_is_a_module` fails when one is forgotten.

mod harness;

mod attacks;
mod config;
mod conservation;
mod costaking;
mod departures;
mod drain;
mod income;
mod leases;
mod limits;
mod nodes;
mod pools;
mod receipt_vector;
mod review;
mod reward_vector;
mod rewards;
mod settlement;
mod slashing;
mod stake;
mod tolerance;
mod verification;

/// Without auto-discovery a test file left out of the list above would silently never run.
#[test]
fn every_test_file_is_a_module() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests");
    let declared: Vec<&str> =
        include_str!("main.rs").lines().filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';')).collect();
    let mut files = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else { continue };
        if path.extension().is_some_and(|e| e == "rs") && stem != "main" {
            files += 1;
            assert!(declared.contains(&stem), "tests/{stem}.rs is not a module of tests/main.rs");
        }
    }
    assert!(files >= 12, "only {files} test files found in {}", dir.display());
}
