//! The `gridfold` command line. Everything here is a thin shell over the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    match gridfold::cli::run() {
        Ok(code) => code,
        // Input the user must fix (a bad flag or credentials file) exits 2, wherever it surfaced.
        Err(error) => match error.downcast_ref::<gridfold::cli::BadInput>() {
            Some(bad) => gridfold::cli::bad_input(gridfold::cli::BadInput(bad.0.clone())),
            None => {
                eprintln!("gridfold: {}", one_message(&error));
                ExitCode::from(1)
            }
        },
    }
}

/// The error and its causes in one line, each cause once: many library errors
/// already print their source in their own text (`no responders: no responders`
/// is what `{:#}` makes of them), so a cause whose text the message already
/// holds is left out.
fn one_message(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = gridfold::cli::said_once(&cause.to_string());
        if text.is_empty() || message.contains(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    gridfold::cli::said_once(&message)
}
