//! The `gridfold` command line. Everything here is a thin shell over the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    match gridfold::cli::run() {
        Ok(code) => code,
        // Input the user must fix (a bad flag or credentials file) exits 2, wherever it surfaced.
        Err(error) => match error.downcast_ref::<gridfold::cli::BadInput>() {
            Some(bad) => gridfold::cli::bad_input(gridfold::cli::BadInput(bad.0.clone())),
            None => {
                eprintln!("gridfold: {error:#}");
                ExitCode::from(1)
            }
        },
    }
}
