//! `wat2wasm IN.wat OUT.wasm`: assembles a WebAssembly text module into its binary form, for
//! the test workloads (test/wasm/workloads). The output is written under a temporary name and
//! renamed, so a failed run never leaves a half-written module behind.

use std::path::Path;
use std::process::ExitCode;

fn assemble(input: &Path, output: &Path) -> Result<(), String> {
    let binary = wat::parse_file(input).map_err(|err| format!("{}: {err}", input.display()))?;
    let mut partial = output.as_os_str().to_owned();
    partial.push(".partial");
    std::fs::write(&partial, binary)
        .map_err(|err| format!("writing {}: {err}", output.display()))?;
    std::fs::rename(&partial, output).map_err(|err| format!("writing {}: {err}", output.display()))
}

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: wat2wasm IN.wat OUT.wasm");
        return ExitCode::from(2);
    };
    match assemble(Path::new(input), Path::new(output)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("wat2wasm: {err}");
            ExitCode::FAILURE
        }
    }
}
