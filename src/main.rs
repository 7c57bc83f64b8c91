//! The `gridfold` command line. Everything here is a thin shell over the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    match gridfold::cli::run() {
        Ok(code) => code,
        Err(error) => {
            eprintln!("gridfold: {error:#}");
            ExitCode::from(1)
        }
    }
}
