//! Figures as a person reads them in logs and messages, where Rust's debug
//! form (`1.5s`, `Exited(0)`, `Some(..)`) would otherwise creep in.

use std::time::Duration;

/// `250 ms`, `1.5 s`, `3 min 4 s`, `2 h 5 min`: whole milliseconds below a
/// second, one decimal below a minute, then the two largest units.
pub fn duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    let s = duration.as_secs();
    match s {
        0 => format!("{ms} ms"),
        1..60 => match ms % 1000 / 100 {
            0 => format!("{s} s"),
            tenth => format!("{s}.{tenth} s"),
        },
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        3600..86_400 => format!("{} h {} min", s / 3600, s % 3600 / 60),
        _ => format!("{} d {} h", s / 86_400, s % 86_400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_a_person_says_them() {
        let cases = [
            (Duration::ZERO, "0 ms"),
            (Duration::from_millis(250), "250 ms"),
            (Duration::from_secs(5), "5 s"),
            (Duration::from_millis(1_550), "1.5 s"),
            (Duration::from_secs(184), "3 min 4 s"),
            (Duration::from_secs(7_500), "2 h 5 min"),
            (Duration::from_secs(3 * 86_400 + 4 * 3600), "3 d 4 h"),
        ];
        for (d, text) in cases {
            assert_eq!(duration(d), text);
        }
    }
}
