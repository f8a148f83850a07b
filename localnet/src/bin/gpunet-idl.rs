//! `gpunet-idl`: builds the Anchor IDL of `programs/gpunet` on the host (no SBF toolchain).
//!
//! ```text
//! gpunet-idl                 print the IDL (pretty JSON) on stdout
//! gpunet-idl --write PATH    write it to PATH
//! gpunet-idl --check PATH    exit 1 when PATH differs from the program's IDL
//! ```
//!
//! The IDL comes from `anchor_lang_idl::build::IdlBuilder`, which runs
//! `cargo test __anchor_private_print_idl --features idl-build` in the program crate.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
};

use anchor_lang_idl::build::IdlBuilder;

const USAGE: &str = "usage: gpunet-idl [--check PATH | --write PATH]";

enum Mode {
    Print,
    Write(PathBuf),
    Check(PathBuf),
}

fn parse_args() -> Result<Mode, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(Mode::Print),
        [flag, path] if flag == "--write" => Ok(Mode::Write(path.into())),
        [flag, path] if flag == "--check" => Ok(Mode::Check(path.into())),
        [flag] if flag == "-h" || flag == "--help" => {
            println!("{USAGE}");
            std::process::exit(0);
        }
        _ => Err(USAGE.to_string()),
    }
}

fn program_path() -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../programs/gpunet");
    path.canonicalize().unwrap_or(path)
}

/// Builds the IDL and renders it as pretty JSON (2-space indent) with a trailing newline.
fn build_idl_json() -> Result<String, String> {
    // anchor-lang-idl 0.1.4 passes the literal argument "+{toolchain}" to cargo when
    // RUSTUP_TOOLCHAIN is set (rustup's proxies set it): drop it, the proxy picks the
    // same toolchain from the environment/rust-toolchain file anyway.
    std::env::remove_var("RUSTUP_TOOLCHAIN");
    // The builder sets RUSTFLAGS="-A warnings", which would change every crate's
    // fingerprint and rebuild all dependencies in the shared target directory. Cargo
    // prefers CARGO_ENCODED_RUSTFLAGS over RUSTFLAGS; an empty value means "no flags",
    // the same as a normal build.
    std::env::set_var("CARGO_ENCODED_RUSTFLAGS", "");
    // `cargo run` gives this binary the package variables of gpunet-localnet
    // (CARGO_MANIFEST_DIR, CARGO_PKG_NAME, ...). The nested cargo would inherit them, and
    // build scripts that track them (ring, through `rerun-if-env-changed`) would rerun,
    // then rerun again at the next plain build: every agave crate rebuilt twice.
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || matches!(key, "CARGO_CRATE_NAME" | "CARGO_BIN_NAME" | "CARGO_PRIMARY_PACKAGE" | "OUT_DIR")
        {
            std::env::remove_var(key);
        }
    }

    let idl = IdlBuilder::new()
        .program_path(program_path())
        .no_docs(false)
        .resolution(true)
        .skip_lint(false)
        // Only the lib test target: the program's integration tests are not needed.
        .cargo_args(vec!["--lib".into()])
        .build()
        .map_err(|e| format!("gpunet-idl: building the IDL failed: {e:#}"))?;

    let mut json =
        serde_json::to_string_pretty(&idl).map_err(|e| format!("gpunet-idl: serializing the IDL failed: {e}"))?;
    json.push('\n');
    Ok(json)
}

fn run() -> Result<ExitCode, String> {
    let mode = parse_args()?;
    let json = build_idl_json()?;
    match mode {
        Mode::Print => {
            print!("{json}");
        }
        Mode::Write(path) => {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|e| format!("gpunet-idl: creating {}: {e}", dir.display()))?;
            }
            std::fs::write(&path, &json).map_err(|e| format!("gpunet-idl: writing {}: {e}", path.display()))?;
            eprintln!("gpunet-idl: wrote {}", path.display());
        }
        Mode::Check(path) => {
            let committed =
                std::fs::read_to_string(&path).map_err(|e| format!("gpunet-idl: reading {}: {e}", path.display()))?;
            if committed != json {
                eprintln!(
                    "IDL drift: {} differs from the IDL of programs/gpunet: run scripts/idl to regenerate",
                    path.display()
                );
                if let Some((n, (want, got))) =
                    json.lines().zip(committed.lines()).enumerate().find(|(_, (a, b))| a != b)
                {
                    eprintln!("first difference at line {}:", n + 1);
                    eprintln!("  program:   {want}");
                    eprintln!("  committed: {got}");
                } else {
                    eprintln!(
                        "program IDL has {} lines, committed file has {}",
                        json.lines().count(),
                        committed.lines().count()
                    );
                }
                return Ok(ExitCode::FAILURE);
            }
            eprintln!("gpunet-idl: {} is up to date", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("{msg}");
            ExitCode::from(2)
        }
    }
}
