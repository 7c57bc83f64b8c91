//! The web view's one way to learn anything: questions to the projector on
//! `gridfold.q.*` (request/reply, JSON), over one broker connection kept for
//! the life of the process, each answer awaited at most [`ANSWER_TIMEOUT`].

use std::time::Duration;

use crate::log::connect::Refusals;

/// How long a question waits for the projector's answer.
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a question got no usable answer, as a person reads it.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("no projector answered on {subject}: is `gridfold projector` running against this broker?")]
    NoProjector { subject: String },
    #[error("no projector answered on {subject} within {} s", ANSWER_TIMEOUT.as_secs())]
    Timeout { subject: String },
    #[error("the broker refused the question on {subject}: {detail}")]
    Refused { subject: String, detail: String },
    #[error("the projector's answer on {subject} does not decode: {detail}")]
    Undecodable { subject: String, detail: String },
    #[error("the projector answered on {subject} with an error: {error}")]
    Answered { subject: String, error: String },
}

/// A broker connection that asks the projector.
#[derive(Clone)]
pub struct Source {
    client: async_nats::Client,
    refusals: Refusals,
}

impl Source {
    pub fn new(client: async_nats::Client, refusals: Refusals) -> Source {
        Source { client, refusals }
    }

    /// Asks on `subject` and decodes the JSON answer.
    pub async fn ask<Q: serde::Serialize, A: serde::de::DeserializeOwned>(&self, subject: &str, question: &Q) -> Result<A, AskError> {
        let payload = serde_json::to_vec(question).expect("a question serialises");
        let answered = tokio::time::timeout(ANSWER_TIMEOUT, self.client.request(subject.to_string(), payload.into())).await;
        let reply = match answered {
            Ok(Ok(reply)) => reply,
            _ if self.refusals.latest().is_some() => {
                return Err(AskError::Refused { subject: subject.into(), detail: self.refusals.latest().unwrap_or_default() });
            }
            Ok(Err(_)) => return Err(AskError::NoProjector { subject: subject.into() }),
            Err(_) => return Err(AskError::Timeout { subject: subject.into() }),
        };
        serde_json::from_slice(&reply.payload).map_err(|undecodable| {
            match serde_json::from_slice::<crate::projector::query::QueryError>(&reply.payload) {
                Ok(answered) => AskError::Answered { subject: subject.into(), error: answered.error },
                Err(_) => AskError::Undecodable { subject: subject.into(), detail: undecodable.to_string() },
            }
        })
    }
}
