//! Throughput over time: a bounded ring of samples of the projector's task
//! counters, taken by the web process once a second, and the SVG plot drawn
//! from it on the server. The ring forgets the oldest sample beyond
//! [`SAMPLES_MAX`]; nothing here is kept anywhere else.

use std::collections::VecDeque;
use std::fmt::Write as _;

use super::html::Html;

/// Samples kept: ten minutes at one a second.
pub const SAMPLES_MAX: usize = 600;

/// The counters at one moment, by the web process's own clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Milliseconds since the web view started.
    pub at_ms: u64,
    pub tasks_done: u64,
    pub tasks_failed: u64,
}

#[derive(Debug, Default)]
pub struct Ring {
    samples: VecDeque<Sample>,
}

impl Ring {
    pub fn push(&mut self, sample: Sample) {
        // A projector restarted from an older snapshot can count less: start over.
        if self.samples.back().is_some_and(|last| last.tasks_done > sample.tasks_done || last.at_ms > sample.at_ms) {
            self.samples.clear();
        }
        if self.samples.len() == SAMPLES_MAX {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
        assert!(self.samples.len() <= SAMPLES_MAX);
    }

    pub fn len(&self) -> usize {
        self.samples.len()
    }

    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// (end of the interval in ms, tasks done per second over it) for each pair of samples.
    fn rates(&self) -> Vec<(u64, f64)> {
        self.samples
            .iter()
            .zip(self.samples.iter().skip(1))
            .filter(|(a, b)| b.at_ms > a.at_ms)
            .map(|(a, b)| (b.at_ms, (b.tasks_done - a.tasks_done) as f64 * 1000.0 / (b.at_ms - a.at_ms) as f64))
            .collect()
    }

    /// The plot: tasks completed per second over the samples kept, newest on the right.
    pub fn svg(&self) -> Html {
        const WIDTH: f64 = 640.0;
        const HEIGHT: f64 = 180.0;
        const LEFT: f64 = 48.0;
        const BOTTOM: f64 = 24.0;
        const TOP: f64 = 12.0;
        let rates = self.rates();
        let peak = rates.iter().map(|&(_, rate)| rate).fold(0.0_f64, f64::max);
        let y_max = nice_ceiling(peak);
        let (first_ms, last_ms) = match (rates.first(), rates.last()) {
            (Some(first), Some(last)) => (first.0, last.0),
            _ => (0, 0),
        };
        let span_ms = (last_ms - first_ms).max(1);
        let x = |at_ms: u64| LEFT + (WIDTH - LEFT - 8.0) * (at_ms - first_ms) as f64 / span_ms as f64;
        let y = |rate: f64| TOP + (HEIGHT - TOP - BOTTOM) * (1.0 - rate / y_max);
        let mut svg = String::new();
        let _ = write!(
            svg,
            "<svg class=\"plot\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" aria-label=\"tasks done per second\">"
        );
        let _ = write!(svg, "<line class=\"axis\" x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{:.1}\"/>", HEIGHT - BOTTOM);
        let _ = write!(svg, "<line class=\"axis\" x1=\"{LEFT}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\"/>", HEIGHT - BOTTOM, WIDTH - 8.0);
        let _ = write!(svg, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>", LEFT - 4.0, TOP + 8.0, format_rate(y_max));
        let _ = write!(svg, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">0</text>", LEFT - 4.0, HEIGHT - BOTTOM);
        let _ = write!(svg, "<text x=\"{LEFT}\" y=\"{:.1}\">{} s ago</text>", HEIGHT - 6.0, span_ms.div_ceil(1000));
        let _ = write!(svg, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">now · tasks done per second</text>", WIDTH - 8.0, HEIGHT - 6.0);
        if rates.len() >= 2 {
            svg.push_str("<polyline class=\"rate\" points=\"");
            for &(at_ms, rate) in &rates {
                let _ = write!(svg, "{:.1},{:.1} ", x(at_ms), y(rate));
            }
            svg.push_str("\"/>");
        } else {
            let _ = write!(svg, "<text x=\"{:.1}\" y=\"{:.1}\">gathering samples…</text>", LEFT + 12.0, HEIGHT / 2.0);
        }
        svg.push_str("</svg>");
        let mut html = Html::new();
        html.push_generated(svg);
        html
    }
}

/// The smallest of 1, 2, 5 × 10^k at or above `value` (1 at least).
fn nice_ceiling(value: f64) -> f64 {
    let mut ceiling = 1.0;
    for _ in 0..40 {
        for step in [1.0, 2.0, 5.0] {
            if ceiling * step >= value {
                return ceiling * step;
            }
        }
        ceiling *= 10.0;
    }
    ceiling
}

fn format_rate(rate: f64) -> String {
    if rate.fract() == 0.0 { format!("{rate:.0}") } else { format!("{rate:.1}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_at_most_600_samples_and_plots_their_rates() {
        let mut ring = Ring::default();
        for i in 0..700_u64 {
            ring.push(Sample { at_ms: i * 1000, tasks_done: i * 3, tasks_failed: 0 });
        }
        assert_eq!(ring.len(), SAMPLES_MAX);
        let svg = ring.svg().into_string();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"), "{svg}");
        assert!(svg.contains("<polyline"), "{svg}");
        assert!(svg.contains(">5</text>"), "3 a second rounds up to 5 on the axis: {svg}");
        ring.push(Sample { at_ms: 700_000, tasks_done: 1, tasks_failed: 0 });
        assert_eq!(ring.len(), 1, "a counter that went back starts the ring over");
        assert!(ring.svg().into_string().contains("gathering samples"));
    }
}
