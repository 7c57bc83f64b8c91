//! Whether a JetStream stream is fit for gridfold to use: one that copies its
//! messages elsewhere, or takes in messages from elsewhere, is not.
//!
//! A stream may source or mirror other streams, republish what it stores onto
//! other subjects, or transform subjects on the way in. Any of these, on a
//! stream gridfold uses, would let whoever made the stream read what they may
//! not (the log's job specifications, another engine's deliveries) or publish
//! where they may not (a republish onto `gridfold.>` goes out as the server,
//! whatever its maker's permissions). gridfold creates every stream it uses
//! with a fixed configuration of its own, and every component checks a stream
//! with [`copies_elsewhere`] before it binds, so a stream made by anyone else
//! (an engine before engines lost the right to create streams, a hand) is
//! refused with the reason, not used.

use async_nats::jetstream::stream::Config;
use async_nats::jetstream::{self as js, object_store};

/// What in `config` copies messages into or out of the stream, or takes in
/// subjects other than `subjects` (the stream's own, exactly); empty when
/// nothing does. Each problem is a phrase for a person.
pub fn copies_elsewhere(config: &Config, subjects: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(mirror) = &config.mirror {
        problems.push(format!("it mirrors stream {}", mirror.name));
    }
    if let Some(sources) = config.sources.as_ref().filter(|sources| !sources.is_empty()) {
        let names: Vec<&str> = sources.iter().map(|source| source.name.as_str()).collect();
        problems.push(format!("it sources stream(s) {}", names.join(", ")));
    }
    if let Some(republish) = &config.republish {
        problems.push(format!("it republishes {} onto {}", republish.source, republish.destination));
    }
    if let Some(transform) = &config.subject_transform {
        problems.push(format!("it transforms subjects {} into {}", transform.source, transform.destination));
    }
    let mut actual: Vec<&str> = config.subjects.iter().map(String::as_str).collect();
    let mut wanted = subjects.to_vec();
    actual.sort_unstable();
    wanted.sort_unstable();
    if actual != wanted {
        problems.push(format!("its subjects are {} instead of {}", actual.join(", "), wanted.join(", ")));
    }
    problems
}

/// Why a stream was refused: its name and every problem [`copies_elsewhere`] found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "stream {stream} is not gridfold's to use: {}; gridfold makes its streams itself (the projector, `gridfold setup`): \
     an operator should delete this one and let them",
    problems.join("; ")
)]
pub struct UnfitStream {
    pub stream: String,
    pub problems: Vec<String>,
}

/// [`copies_elsewhere`] as a result.
pub fn check_fit(config: &Config, subjects: &[&str]) -> Result<(), UnfitStream> {
    let problems = copies_elsewhere(config, subjects);
    if problems.is_empty() { Ok(()) } else { Err(UnfitStream { stream: config.name.clone(), problems }) }
}

/// The subjects of the stream behind object store `bucket`.
pub fn object_store_subjects(bucket: &str) -> [String; 2] {
    [format!("$O.{bucket}.C.>"), format!("$O.{bucket}.M.>")]
}

/// Why an object store cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    /// It is not there (or the broker would not say).
    #[error("not available ({0})")]
    Missing(String),
    /// Its stream could not be read, to check it.
    #[error("cannot read its stream: {0}")]
    Unreadable(String),
    #[error(transparent)]
    Unfit(#[from] UnfitStream),
}

/// Object store `bucket`, when there is one and its stream is fit to use: the
/// one way the output and library stores bind their buckets.
pub async fn fit_object_store(context: &js::Context, bucket: &str) -> Result<object_store::ObjectStore, BucketError> {
    let store = context.get_object_store(bucket).await.map_err(|err| BucketError::Missing(err.to_string()))?;
    let stream = context.get_stream(format!("OBJ_{bucket}")).await.map_err(|err| BucketError::Unreadable(err.to_string()))?;
    let subjects = object_store_subjects(bucket);
    let subjects: Vec<&str> = subjects.iter().map(String::as_str).collect();
    check_fit(&stream.cached_info().config, &subjects)?;
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;
    use async_nats::jetstream::stream::{Republish, Source};

    fn config(subjects: &[&str]) -> Config {
        Config { name: "S".into(), subjects: subjects.iter().map(|s| s.to_string()).collect(), ..Default::default() }
    }

    #[test]
    fn a_plain_stream_of_its_own_subjects_is_fit() {
        assert!(check_fit(&config(&["a.>", "b.>"]), &["b.>", "a.>"]).is_ok());
    }

    #[test]
    fn sources_mirrors_republishes_and_other_subjects_are_each_named() {
        let mut evil = config(&["$O.X.C.>", "$O.X.M.>", "gridfold.>"]);
        evil.sources = Some(vec![Source { name: "GRIDFOLD_EVENTS".into(), ..Default::default() }]);
        evil.mirror = Some(Source { name: "GRIDFOLD_ORDERS".into(), ..Default::default() });
        evil.republish = Some(Republish { source: ">".into(), destination: "gridfold.>".into(), headers_only: false });
        let refused = check_fit(&evil, &["$O.X.C.>", "$O.X.M.>"]).unwrap_err();
        assert_eq!(refused.problems.len(), 4, "{refused}");
        let text = refused.to_string();
        for expected in ["sources stream(s) GRIDFOLD_EVENTS", "mirrors stream GRIDFOLD_ORDERS", "republishes > onto gridfold.>", "gridfold.>"] {
            assert!(text.contains(expected), "{expected} in {text}");
        }
        let mut empty_sources = config(&["a"]);
        empty_sources.sources = Some(Vec::new());
        assert!(check_fit(&empty_sources, &["a"]).is_ok(), "an empty list sources nothing");
    }
}
